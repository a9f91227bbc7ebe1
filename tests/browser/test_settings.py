"""Self-service settings (issue 30, item 4) in real Chromium: add a webhook and see its secret
once, see its deliveries and redeliver one, delete it; create an API token, see its key once and
its last use, revoke it; desktop and phone."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def api_status(live, key: str) -> int:
    request = urllib.request.Request(live.url + "/v1/jobs", headers={"Authorization": f"Token {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_webhooks_from_the_settings_page(live, new_page):
    with WebhookReceiver() as receiver:
        page = new_page()
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
        # Without the Clipboard API (a page on plain HTTP away from localhost), copying selects
        # the text and asks the browser to copy it; the test reads the clipboard as before.
        page.add_init_script(
            "window.clipboardForTests = navigator.clipboard;"
            " Object.defineProperty(Navigator.prototype, 'clipboard', {get: () => undefined});"
        )
        page.on("dialog", lambda dialog: dialog.accept())  # Delete asks first (tests/browser/test_forms_and_scroll.py)
        log_in(page, "alice")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Settings").click()
        page.get_by_label("Webhook address").fill(receiver.url)
        page.get_by_label("run.succeeded").uncheck()
        page.get_by_label("run.failed").uncheck()
        page.get_by_label("run.canceled").uncheck()
        page.get_by_role("button", name="Add webhook").click()
        secret = page.locator("#new-webhook-secret")
        expect(secret).to_have_text(re.compile(r"^whsec_"))
        shown = secret.inner_text()
        page.get_by_role("button", name="Copy the webhook's signing secret").click()
        expect(page.locator(".message.once [role=status]")).to_have_text("Copied")
        assert page.evaluate("window.clipboardForTests.readText()") == shown
        expect(page.locator("table.webhooks")).to_contain_text(receiver.url)
        expect(page.locator("table.webhooks")).to_contain_text("run.waiting_user")
        screenshot(page, "57-settings-webhook-added.png")
        page.goto("/settings/")  # the page again: the secret is not there again
        expect(page.locator("#new-webhook-secret")).to_have_count(0)
        assert shown not in page.content()

        ask = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Where?"}}
        live.engine.script({"message": json.dumps(ask)})
        request_id = live.start_trip("alice")
        live.service.wait_until(lambda: len(receiver.received) == 1, 30, "the waiting_user delivery")
        assert receiver.received[0].json["run_url"].endswith(f"/runs/{request_id}/")

        page.reload()  # the page was last loaded by a GET
        delivery = page.locator("table.deliveries tbody tr").first
        expect(delivery).to_contain_text("Delivered")
        expect(delivery).to_contain_text("HTTP 200")
        expect(delivery.get_by_role("link", name=re.compile(request_id[:8]))).to_have_attribute(
            "href", f"/runs/{request_id}/"
        )
        delivery.get_by_role("button", name=re.compile("^Redeliver")).click()
        expect(page.locator(".messages")).to_contain_text("Delivery queued to be sent again")
        live.service.wait_until(lambda: len(receiver.received) == 2, 30, "the delivery sent again")
        assert receiver.received[1].json["delivery_id"] == receiver.received[0].json["delivery_id"]
        screenshot(page, "58-settings-deliveries.png")

        page.locator("table.webhooks").get_by_role("button", name=re.compile("^Delete")).click()
        expect(page.locator(".messages")).to_contain_text("Webhook deleted.")
        expect(page.locator("table.webhooks")).to_have_count(0)
        live.service.request("POST", f"/v1/jobs/{request_id}/cancel", live.token("alice"))


def test_api_tokens_from_the_settings_page(live, new_page):
    page = new_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
    page.on("dialog", lambda dialog: dialog.accept())  # Revoke asks first
    log_in(page, "bob")
    page.goto("/settings/")
    page.get_by_label("Name", exact=True).fill("nightly report")
    page.get_by_label("Expires after").select_option(label="30 days")
    page.get_by_role("button", name="Create a token").click()
    key = page.locator("#new-token-key").inner_text()
    assert key.startswith("sr_")
    expect(page.locator(".message.once")).to_contain_text("New token nightly report")
    page.get_by_role("button", name="Copy the new token's key").click()
    expect(page.locator(".message.once [role=status]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == key
    row = page.locator("table.tokens tbody tr", has_text="nightly report")
    expect(row).to_contain_text(key[:11])
    expect(row.locator("td").nth(3)).to_have_text("never")  # not used yet
    expires = row.locator("td").nth(4).locator("time")
    in_30_days = page.evaluate("new Date(Date.now() + 30 * 86400e3).toISOString().slice(0, 10)")
    expect(expires).to_have_attribute("datetime", re.compile("^" + in_30_days))
    screenshot(page, "59-settings-token-created.png")

    assert api_status(live, key) == 200
    page.goto("/settings/")
    expect(row.locator("td").nth(3)).not_to_have_text("never")  # its last use is shown
    assert key not in page.content()

    # A second active token of the same name is refused, saying why; the form keeps what was typed.
    page.get_by_label("Name", exact=True).fill("nightly report")
    page.get_by_role("button", name="Create a token").click()
    expect(page.locator("#tokens .errorlist")).to_contain_text("already have an active token named 'nightly report'")
    expect(page.locator("#tokens .errorlist")).to_contain_text("(TOKEN_NAME_TAKEN)")
    expect(page.get_by_label("Name", exact=True)).to_have_value("nightly report")
    screenshot(page, "41-10-settings-token-name-taken.png", "#tokens")

    page.goto("/settings/")
    row.get_by_role("button", name=re.compile("Revoke")).click()
    expect(page.locator(".messages")).to_contain_text("Token revoked")
    expect(row).to_have_count(0)  # folded away
    folded = page.locator("details.ended-tokens")
    expect(folded.locator("summary")).to_have_text(re.compile(r"^Revoked and expired \(\d+\)$"))
    expect(folded.locator("li", has_text="nightly report")).not_to_be_visible()
    folded.locator("summary").click()
    expect(folded.locator("li", has_text="nightly report")).to_contain_text("revoked")
    screenshot(page, "41-11-settings-tokens-folded.png", "#tokens")
    assert api_status(live, key) == 401

    phone = new_page({"width": 390, "height": 844})
    log_in(phone, "bob")
    phone.goto("/settings/#tokens")
    phone.get_by_label("Name", exact=True).fill("a token with a rather long name for a phone screen")
    phone.get_by_label("Expires after").select_option(label="Never")
    phone.get_by_role("button", name="Create a token").click()
    expect(phone.locator("#new-token-key")).to_be_visible()
    expect(phone.get_by_role("button", name="Copy the new token's key")).to_be_visible()
    expect(phone.locator("table.tokens tbody tr").first.locator("td").nth(4)).to_have_text("never")
    phone.locator("details.ended-tokens summary").click()
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(phone, "60-settings-phone.png")
    screenshot(phone, "41-12-settings-tokens-phone.png", "#tokens")


@pytest.mark.parametrize("width", [1280, 390])
def test_a_webhooks_test_delivery_and_what_it_sent(live, new_page, width):
    with WebhookReceiver() as receiver:
        page = new_page({"width": width, "height": 900})
        log_in(page, "bob")
        page.goto("/settings/#webhooks")
        page.get_by_label("Webhook address").fill(receiver.url)
        page.get_by_role("button", name="Add webhook").click()
        expect(page.locator("table.webhooks")).to_contain_text(receiver.url)
        hook = page.locator("table.webhooks tbody tr", has_text=receiver.url)
        hook.get_by_role("button", name=re.compile("^Send a test delivery")).click()
        expect(page.locator(".messages")).to_contain_text("Test delivery queued")
        live.service.wait_until(lambda: len(receiver.received) == 1, 30, "the test delivery")
        assert receiver.received[0].json["event"] == "webhook.test"
        page.reload()  # a GET: reloading sends nothing again
        page.wait_for_timeout(500)
        assert len(receiver.received) == 1
        row = page.locator("table.deliveries tbody tr").first
        expect(row).to_contain_text("Delivered")
        expect(row.locator(".badge", has_text="test")).to_be_visible()
        screenshot(page, f"41-4-webhook-test-delivery-{width}.png")

        row.get_by_role("link", name="webhook.test").click()
        expect(page.get_by_role("heading", name=re.compile("Attempt 1: HTTP 200"))).to_be_visible()
        expect(page.locator("table.headers")).to_contain_text(receiver.received[0].headers["X-SkillRunner-Signature"])
        expect(page.locator("pre.json")).to_contain_text('"event":"webhook.test"')
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        screenshot(page, f"41-4-delivery-detail-{width}.png")
        page.go_back()
        page.wait_for_timeout(500)
        assert len(receiver.received) == 1  # Back repeats nothing either
