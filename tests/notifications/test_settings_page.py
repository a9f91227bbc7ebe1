"""Self-service settings (issue 30, item 4): webhooks and API tokens from the settings page,
through the services the API, the admin and `create_api_token` use, under the settings limit."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ApiToken
from notifications.models import WebhookDelivery, WebhookEndpoint
from runs.models import Run
from tests.notifications.helpers import fake_dns
from tests.support.conversations import ask_envelope, plan_done, start
from tests.support.service_processes import wait_until
from tests.support.throttling import forget_throttling

pytestmark = pytest.mark.django_db(transaction=True)

HOOK = "https://hooks.example.com/runs"


@pytest.fixture(autouse=True)
def public_dns(monkeypatch):
    """hooks.example.com resolves to a public address (the resolver is the boundary we fake)."""
    fake_dns(monkeypatch, {"hooks.example.com": ["93.184.215.14"]})


@pytest.fixture
def browser(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_add_a_webhook_sees_its_secret_once_and_lists_it(browser, alice, api):
    added = browser.post("/settings/webhooks/", {"url": HOOK, "events": ["run.waiting_user", "run.failed"]})
    assert added.status_code == 302 and added["Location"] == "/settings/#webhooks"  # post/redirect/get
    endpoint = WebhookEndpoint.objects.get(owner=alice)
    shown = browser.get(added["Location"])
    html = shown.content.decode()
    assert "no-store" in shown["Cache-Control"]
    assert f'<code id="new-webhook-secret">{endpoint.secret}</code>' in html
    assert endpoint.url == HOOK and endpoint.events == ["run.waiting_user", "run.failed"]
    listed = browser.get("/settings/").content.decode()
    assert HOOK in listed and "run.waiting_user, run.failed" in listed and endpoint.secret not in listed
    assert [hook["url"] for hook in api.get("/v1/webhooks").json()] == [HOOK]  # the API sees the same


def test_a_refused_webhook_comes_back_with_the_services_code(browser, alice):
    refused = browser.post("/settings/webhooks/", {"url": "http://127.0.0.1:9/hook", "events": ["run.failed"]})
    assert refused.status_code == 400
    assert "(WEBHOOK_URL_FORBIDDEN)" in refused.content.decode()
    none = browser.post("/settings/webhooks/", {"url": HOOK, "events": []})
    assert none.status_code == 400 and "This field is required." in none.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_delete_only_ones_own_webhook(browser, bob, bob_api, api):
    mine = api.post("/v1/webhooks", {"url": HOOK}, format="json").json()["id"]
    theirs = bob_api.post("/v1/webhooks", {"url": HOOK}, format="json").json()["id"]
    assert browser.post(f"/settings/webhooks/{theirs}/delete/").status_code == 404
    assert browser.post("/settings/webhooks/²/delete/").status_code == 404
    done = browser.post(f"/settings/webhooks/{mine}/delete/", follow=True)
    assert "Webhook deleted." in done.content.decode()
    assert list(WebhookEndpoint.objects.filter(deleted_at__isnull=True).values_list("pk", flat=True)) == [theirs]
    assert [hook["id"] for hook in api.get("/v1/webhooks").json()] == []
    assert api.delete(f"/v1/webhooks/{mine}").status_code == 404
    assert browser.post(f"/settings/webhooks/{mine}/delete/").status_code == 404  # deleted once


def test_a_deleted_webhook_keeps_its_history_and_receives_nothing_more(
    browser, alice, api, install_skill, fake_codex, receiver
):
    """Issue 41, item 3: deleting a webhook keeps the record of what was sent to it."""
    install_skill("trip-planner")
    hook = api.post("/v1/webhooks", {"url": receiver.url, "events": ["run.waiting_user"]}, format="json").json()
    fake_codex.script(ask_envelope({"interaction_id": 1, "kind": "open_text", "prompt": "Where?"}), plan_done())
    start(api)
    wait_until(lambda: len(receiver.received) == 1, 10, "the delivery")
    browser.post(f"/settings/webhooks/{hook['id']}/delete/")
    page = browser.get("/settings/")
    (delivery,) = page.context["deliveries"]
    html = page.content.decode()
    assert 'class="badge delivery-delivered"' in html and '<span class="badge">deleted</span>' in html
    assert f"/settings/deliveries/{delivery.pk}/redeliver/" not in html  # nowhere to send it again
    assert browser.post(f"/settings/deliveries/{delivery.pk}/redeliver/").status_code == 404
    fake_codex.script(ask_envelope({"interaction_id": 1, "kind": "open_text", "prompt": "Where?"}), plan_done())
    start(api)
    wait_until(lambda: Run.objects.filter(status="waiting_user").count() == 2, 10, "the second run waiting")
    assert WebhookDelivery.objects.count() == 1 and len(receiver.received) == 1


def test_recent_deliveries_show_their_state_and_redeliver(browser, api, bob_api, install_skill, fake_codex, receiver):
    install_skill("trip-planner")
    api.post("/v1/webhooks", {"url": receiver.url, "events": ["run.waiting_user"]}, format="json")
    bob_api.post("/v1/webhooks", {"url": receiver.url, "events": ["run.waiting_user"]}, format="json")
    fake_codex.script(ask_envelope({"interaction_id": 1, "kind": "open_text", "prompt": "Where?"}), plan_done())
    request_id = start(api)
    start(bob_api)
    wait_until(lambda: len(receiver.received) == 2, 10, "both deliveries")
    page = browser.get("/settings/")
    (delivery,) = page.context["deliveries"]  # bob's is not alice's
    assert delivery.run_id is not None and str(delivery.run_id) == request_id
    delivery.refresh_from_db()
    assert delivery.state == "delivered"
    assert '<span class="badge delivery-delivered">Delivered</span>' in page.content.decode()
    again = browser.post(f"/settings/deliveries/{delivery.pk}/redeliver/", follow=True)
    assert "Delivery queued to be sent again" in again.content.decode()
    wait_until(lambda: len(receiver.received) == 3, 10, "the delivery sent again")
    assert receiver.received[-1].json["delivery_id"] == str(delivery.delivery_id)
    assert WebhookDelivery.objects.get(pk=delivery.pk).attempt_count == 2
    bobs = WebhookDelivery.objects.exclude(pk=delivery.pk).get()
    assert browser.post(f"/settings/deliveries/{bobs.pk}/redeliver/").status_code == 404


def test_create_a_token_sees_its_key_once_uses_it_and_revokes_it(browser, alice, bob):
    created = browser.post("/settings/tokens/", {"name": "deploy script", "lifetime": "30"})
    assert created.status_code == 302 and created["Location"] == "/settings/#tokens"  # post/redirect/get
    token = ApiToken.objects.get(user=alice)
    shown = browser.get(created["Location"])
    html = shown.content.decode()
    assert "no-store" in shown["Cache-Control"]
    key = html.split('<code id="new-token-key">', 1)[1].split("</code>", 1)[0]
    assert ApiToken.objects.for_key(key) == token
    program = APIClient()
    program.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert program.get("/v1/jobs").status_code == 200
    listed = browser.get("/settings/").content.decode()
    assert key not in listed and f"sr_{token.lookup}…" in listed and "deploy script" in listed
    assert "never" not in listed  # it has been used, and it expires

    _, bobs_key = ApiToken.issue(bob)
    bobs = ApiToken.objects.get(user=bob)
    assert browser.post(f"/settings/tokens/{bobs.pk}/revoke/").status_code == 404
    revoked = browser.post(f"/settings/tokens/{token.pk}/revoke/", follow=True)
    assert "Token revoked" in revoked.content.decode()
    assert program.get("/v1/jobs").status_code == 401
    assert browser.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 404  # already revoked
    assert ApiToken.objects.for_key(bobs_key) == bobs


def test_settings_changes_share_the_settings_limit(browser, alice, api, monkeypatch):
    forget_throttling(alice)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"settings_change": "2/min"})
    try:
        assert browser.post("/settings/tokens/", {"name": "first"}).status_code == 302
        assert api.post("/v1/webhooks", {"url": HOOK}, format="json").status_code == 201
        refused = browser.post("/settings/webhooks/", {"url": HOOK, "events": ["run.failed"]})
        assert refused.status_code == 429 and "(RATE_LIMITED)" in refused.content.decode()
        again = browser.post("/settings/tokens/", {"name": "second"})
        assert again.status_code == 429 and "(RATE_LIMITED)" in again.content.decode()
        assert ApiToken.objects.filter(user=alice).count() == 2  # the API client's and the first
    finally:
        forget_throttling(alice)


def test_reloading_the_page_after_a_form_repeats_nothing(browser, alice):
    """What a browser's reload and Back do after post/redirect/get: GET the page the POST
    redirected to. The key shown once is gone, and nothing more was made."""
    browser.post("/settings/tokens/", {"name": "ci"})
    browser.post("/settings/webhooks/", {"url": HOOK, "events": ["run.failed"]})
    first = browser.get("/settings/").content.decode()
    assert 'id="new-webhook-secret"' in first and 'id="new-token-key"' not in first  # the later one's
    again = browser.get("/settings/").content.decode()
    assert 'id="new-webhook-secret"' not in again and 'id="new-token-key"' not in again
    assert ApiToken.objects.filter(user=alice).count() == 1
    assert WebhookEndpoint.objects.filter(owner=alice).count() == 1


def test_a_test_delivery_goes_through_the_outbox_and_shows_what_was_sent(alice, bob, receiver):
    from notifications import services

    endpoint = services.register_endpoint(owner=alice, url=receiver.url, events=["run.failed"])
    owner, other = Client(), Client()
    owner.force_login(alice)
    other.force_login(bob)
    sent = owner.post(f"/settings/webhooks/{endpoint.pk}/test/")
    assert sent.status_code == 302 and sent["Location"].startswith("/settings/")  # post/redirect/get
    assert other.post(f"/settings/webhooks/{endpoint.pk}/test/").status_code == 404  # not bob's webhook
    delivery = WebhookDelivery.objects.get()
    assert delivery.is_test and delivery.event == "webhook.test" and delivery.run is None
    assert delivery.state == "delivered" and delivery.attempt_count == 1  # sent by the outbox (sync cluster)
    (request,) = receiver.received
    assert request.json == delivery.payload and request.headers["X-SkillRunner-Event"] == "webhook.test"
    listed = owner.get("/settings/").content.decode()
    assert f'href="/settings/deliveries/{delivery.pk}/"' in listed and '<span class="badge">test</span>' in listed

    page = owner.get(f"/settings/deliveries/{delivery.pk}/")
    html = page.content.decode()
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    assert str(delivery.delivery_id) in html and "HTTP 200" in html
    assert request.headers["X-SkillRunner-Signature"] in html  # the headers sent
    assert "&quot;event&quot;:&quot;webhook.test&quot;" in html  # the body sent, escaped
    assert ">ok</pre>" in html  # the receiver's answer
    assert other.get(f"/settings/deliveries/{delivery.pk}/").status_code == 404
    assert owner.get("/settings/deliveries/x/").status_code == 404
