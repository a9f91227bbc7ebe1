"""Issue 41 in real Chromium: settings forms that never repeat on reload or Back, a styled page
for a form's address opened, confirmations before revoking or deleting, the local user's header
without "Log out", and a run page that does not jump on load; desktop and phone."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SCREENSHOTS, log_in, screenshot
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

PHONE = {"width": 390, "height": 844}


def token_rows(page):
    return page.locator("table.tokens tbody tr")


def test_reload_and_back_after_creating_a_token_repeat_nothing(live, new_page):
    page = new_page()
    log_in(page, "alice")
    page.goto("/settings/")
    before = token_rows(page).count()
    page.get_by_label("Name", exact=True).fill("reload check")
    page.get_by_role("button", name="Create a token").click()
    expect(page.locator("#new-token-key")).to_have_text(re.compile(r"^sr_"))
    assert page.url.endswith("/settings/#tokens")  # the answer to the POST was a redirect
    expect(token_rows(page)).to_have_count(before + 1)
    screenshot(page, "41-01-token-created-after-redirect.png")

    page.reload()
    expect(page.locator("#new-token-key")).to_have_count(0)  # shown once
    expect(token_rows(page)).to_have_count(before + 1)
    page.go_back()
    page.go_forward()
    page.reload()
    expect(token_rows(page)).to_have_count(before + 1)

    page.goto("/settings/tokens/")  # the form's address opened
    expect(page.get_by_role("heading", name="Not a page to open")).to_be_visible()
    expect(page.locator(".error-code")).to_have_text("405")
    screenshot(page, "41-02-form-address-opened.png")
    phone = new_page(PHONE)
    log_in(phone, "alice")
    phone.goto("/accounts/logout/")
    expect(phone.get_by_role("heading", name="Not a page to open")).to_be_visible()
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(phone, "41-03-form-address-opened-phone.png")


def test_revoking_a_token_and_deleting_a_webhook_ask_first(live, new_page):
    with WebhookReceiver() as receiver:
        page = new_page(PHONE)
        log_in(page, "bob")
        page.goto("/settings/")
        page.get_by_label("Name", exact=True).fill("asks first")
        page.get_by_role("button", name="Create a token").click()
        row = token_rows(page).filter(has_text="asks first")
        expect(row).to_be_visible()

        questions: list[str] = []
        page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
        row.get_by_role("button", name=re.compile("^Revoke")).click()
        expect(row).to_be_visible()  # Cancel: nothing sent, the token is still listed as active
        assert questions and questions[0].startswith("Revoke this token?")
        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name=re.compile("^Revoke")).click()
        expect(page.locator(".messages")).to_contain_text("Token revoked")
        expect(row).to_have_count(0)  # folded away with the ended ones

        page.get_by_label("Webhook address").fill(receiver.url)
        page.get_by_role("button", name="Add webhook").click()
        expect(page.locator("#new-webhook-secret")).to_have_text(re.compile(r"^whsec_"))
        assert page.url.endswith("/settings/#webhooks")
        page.reload()
        expect(page.locator("#new-webhook-secret")).to_have_count(0)
        expect(page.locator("table.webhooks tbody tr")).to_have_count(1)  # not added twice

        ask = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Where?"}}
        live.engine.script({"message": json.dumps(ask)})
        request_id = live.start_trip("bob")
        live.service.wait_until(lambda: len(receiver.received) == 1, 30, "the waiting_user delivery")
        page.reload()
        delete = page.locator("table.webhooks").get_by_role("button", name=re.compile("^Delete"))
        page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
        delete.click()
        expect(page.locator("table.webhooks tbody tr")).to_have_count(1)
        assert questions[-1].startswith("Delete this webhook?")
        page.once("dialog", lambda dialog: dialog.accept())
        delete.click()
        expect(page.locator(".messages")).to_contain_text("Webhook deleted.")
        expect(page.locator("table.webhooks")).to_have_count(0)
        delivery = page.locator("table.deliveries tbody tr").first
        expect(delivery).to_contain_text("Delivered")  # the history stays
        expect(delivery).to_contain_text("deleted")
        expect(delivery.get_by_role("button", name=re.compile("^Redeliver"))).to_have_count(0)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        screenshot(page, "41-04-webhook-deleted-history-kept-phone.png")
        live.service.request("POST", f"/v1/jobs/{request_id}/cancel", live.token("bob"))


def long_finished_trip(live, username: str) -> str:
    """A trip that asked three questions before its plan: a page taller than a phone's screen."""
    asks = [
        {"ask_user": {"interaction_id": n, "kind": "open_text", "prompt": f"Question {n}: " + "tell me more " * 8}}
        for n in (1, 2, 3)
    ]
    plan = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}
    live.engine.script(
        *[{"message": json.dumps(ask)} for ask in asks],
        {"message": json.dumps({**plan, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
    )
    request_id = live.start_trip(username)
    token = live.token(username)
    for n in (1, 2, 3):
        live.service.wait_for_status(token, request_id, {"waiting_user"})
        status, body = live.service.request(
            "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": n, "response": f"answer {n}"}
        )
        assert status == 200, body
    live.service.wait_for_status(token, request_id, {"succeeded"})
    return request_id


@pytest.mark.parametrize(("viewport", "name"), [(PHONE, "phone"), ({"width": 1280, "height": 900}, "desktop")])
def test_the_run_page_does_not_jump_on_load(live, new_page, viewport, name):
    """Issue 41, item 2: the replayed history leaves the title, status and Re-run in view."""
    request_id = long_finished_trip(live, "alice")
    page = new_page(viewport)
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/")
    expect(page.locator("#run-status")).to_have_text("Succeeded")
    expect(page.locator(".entry.reply")).to_have_count(3)
    page.wait_for_timeout(700)  # past the half second in which it used to jump
    assert page.evaluate("window.scrollY") == 0
    assert page.evaluate("document.documentElement.scrollHeight") > viewport["height"]
    expect(page.get_by_role("heading", level=1)).to_be_in_viewport()
    expect(page.get_by_role("button", name=re.compile("Re-run"))).to_be_in_viewport()
    screenshot(page, f"41-05-run-page-loaded-{name}.png")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"41-06-run-page-first-screen-{name}.png"))  # what the reader sees


def test_a_reader_at_the_live_edge_follows_it_and_one_scrolled_up_stays(live, new_page):
    asks = [{"ask_user": {"interaction_id": n, "kind": "open_text", "prompt": f"Question {n}"}} for n in (1, 2)]
    asks.append({"ask_user": {"interaction_id": 3, "kind": "open_text", "prompt": "Question 3"}})
    live.engine.script(*[{"message": json.dumps(ask)} for ask in asks])
    request_id = live.start_trip("alice")
    token = live.token("alice")
    live.service.wait_for_status(token, request_id, {"waiting_user"})
    page = new_page(PHONE)
    log_in(page, "alice")
    page.goto(f"/runs/{request_id}/")
    expect(page.locator(".entry.question")).to_have_count(1)

    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")  # at the live edge
    live.service.request(
        "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": 1, "response": "a"}
    )
    expect(page.locator(".entry.question")).to_have_count(2)
    page.wait_for_timeout(300)
    expect(page.locator(".entry.question").last).to_be_in_viewport()

    page.evaluate("window.scrollTo(0, 0)")  # reading from the top
    live.service.request(
        "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": 2, "response": "b"}
    )
    expect(page.locator(".entry.question")).to_have_count(3)
    page.wait_for_timeout(300)
    assert page.evaluate("window.scrollY") == 0
    live.service.request("POST", f"/v1/jobs/{request_id}/cancel", token)


@pytest.mark.parametrize(("viewport", "name"), [(PHONE, "phone"), ({"width": 1280, "height": 900}, "desktop")])
def test_the_new_run_form_marks_required_fields_and_keeps_operator_settings_to_staff(live, new_page, viewport, name):
    """Issue 41, item 6."""
    page = new_page(viewport)
    log_in(page, "alice")
    page.goto("/runs/new/")
    expect(page.locator(".card.skill", has_text="Haiku writer").locator(".engines-ready")).to_have_text("codex")
    page.goto("/runs/new/haiku-writer/")
    expect(page.locator("label.required", has_text="Topic")).to_be_visible()
    mark = page.locator("label.required", has_text="Topic").evaluate("(l) => getComputedStyle(l, '::after').content")
    assert mark == '" *"'
    expect(page.locator("#engine-notes")).to_contain_text("are not set up on this service; ask its operator")
    assert "SKILLRUNNER_" not in page.locator("main").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    screenshot(page, f"41-07-new-run-form-{name}.png")
    staff = new_page(viewport)
    log_in(staff, "root")
    staff.goto("/runs/new/haiku-writer/")
    expect(staff.locator("#engine-notes")).to_contain_text("SKILLRUNNER_")
