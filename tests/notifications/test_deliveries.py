"""Webhook deliveries (R-NT1): what is sent, how it is signed, when it is retried.

The signature is checked here by an implementation of our own (the hmac module), as a
receiver would, not by the service's signing code.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid

import pytest

from tests.support.conversations import ask_envelope, plan_done, reply, start, status_of
from tests.support.service_processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

QUESTION = {"interaction_id": 1, "kind": "choose_one", "prompt": "Which city?", "options": ["Kyoto", "Osaka"]}


def verify(secret: str, header: str, body: bytes, tolerance: float = 300) -> bool:
    """A receiver's check of `X-SkillRunner-Signature: t=<unix>,v1=<hex>`, written from the SPEC."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    signed = fields["t"].encode() + b"." + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(fields["t"])) <= tolerance
    return fresh and hmac.compare_digest(expected, fields["v1"])


@pytest.fixture
def trip(install_skill):
    install_skill("trip-planner")


def register(api, url: str, events: list[str] | None = None) -> dict:
    response = api.post("/v1/webhooks", {"url": url, **({"events": events} if events else {})}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_waiting_user_and_succeeded_are_delivered_signed(api, trip, fake_codex, receiver):
    """R-NT1 end to end: a question, then the reply's success, each a signed POST with the SPEC's
    body fields and headers; the body is exactly what was signed."""
    hook = register(api, receiver.url)
    fake_codex.script(ask_envelope(QUESTION), plan_done())
    request_id = start(api)
    assert status_of(api, request_id)["status"] == "waiting_user"
    assert receiver.events() == ["run.waiting_user"]
    reply(api, request_id, 1, "Kyoto")
    assert status_of(api, request_id)["status"] == "succeeded"
    assert receiver.events() == ["run.waiting_user", "run.succeeded"]

    waiting, succeeded = receiver.received
    for item in receiver.received:
        assert verify(hook["secret"], item.headers["X-SkillRunner-Signature"], item.body)
        assert not verify("whsec_wrong", item.headers["X-SkillRunner-Signature"], item.body)
        assert item.headers["X-SkillRunner-Event"] == item.json["event"]
        assert item.headers["X-SkillRunner-Delivery"] == item.json["delivery_id"]
        assert item.headers["Content-Type"] == "application/json"
        uuid.UUID(item.json["delivery_id"])
        assert item.json["request_id"] == request_id
    assert waiting.json["status"] == "waiting_user"
    assert waiting.json["pending"]["prompt"] == "Which city?"
    assert waiting.json["pending"]["interaction_id"] == 1
    assert "result" not in waiting.json
    assert succeeded.json["status"] == "succeeded"
    assert succeeded.json["result"]["status"] == "success" and succeeded.json["result"]["error"] is None
    assert "pending" not in succeeded.json
    assert set(succeeded.json) == {"event", "delivery_id", "request_id", "run_url", "status", "result", "ts"}
    # The run's page, from the site's public address (kernel.links): "http://127.0.0.1:8000"
    # when nothing set it, as here.
    assert waiting.json["run_url"] == succeeded.json["run_url"] == f"http://127.0.0.1:8000/runs/{request_id}/"


def test_endpoints_get_only_their_events_and_owners_runs(api, bob_api, trip, fake_codex, receiver):
    register(api, receiver.url, ["run.succeeded"])
    register(bob_api, receiver.url)
    fake_codex.script(ask_envelope(QUESTION), plan_done())
    request_id = start(api)
    reply(api, request_id, 1, "Osaka")
    assert receiver.events() == ["run.succeeded"]


def test_callback_url_receives_all_four_events_of_its_run_only(api, trip, fake_codex, receiver):
    fake_codex.script(ask_envelope(QUESTION), plan_done())
    body = {
        "skill_id": "trip-planner",
        "engine": "codex",
        "input": {},
        "parameter": {},
        "runtime_options": {"execution_mode": "interactive"},
        "callback_url": receiver.url,
    }
    answer = api.post("/v1/jobs", body, format="json").json()
    start(api)  # another run of the same user: not this callback's business
    assert receiver.events() == ["run.waiting_user"]
    assert api.post(f"/v1/jobs/{answer['request_id']}/cancel").json()["status"] == "canceled"
    assert receiver.events() == ["run.waiting_user", "run.canceled"]
    assert {item.json["request_id"] for item in receiver.received} == {answer["request_id"]}
    canceled = receiver.received[-1]
    assert verify(answer["callback_secret"], canceled.headers["X-SkillRunner-Signature"], canceled.body)
    assert canceled.json["result"]["error"]["code"] == "CANCELED_BY_USER"


def test_failing_receiver_is_retried_with_the_same_delivery_id(api, trip, fake_codex, receiver, settings):
    """R-NT1: 5xx and network errors are retried on the schedule (scaled down here by its base
    setting), each attempt recorded, the delivery_id stable; a 2xx ends it."""
    from notifications.models import WebhookDelivery
    from notifications.services import offer_due_deliveries

    settings.SKILLRUNNER_WEBHOOK_RETRY_BASE_SECONDS = 0.05
    receiver.answers = [503, 500, 200]
    register(api, receiver.url, ["run.waiting_user"])
    fake_codex.script(ask_envelope(QUESTION))
    start(api)
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == "pending" and delivery.attempt_count == 1 and delivery.last_status_code == 503
    wait_until(lambda: offer_due_deliveries() and len(receiver.received) == 3, 10, "two retries", interval=0.02)
    delivery.refresh_from_db()
    assert delivery.state == "delivered" and delivery.attempt_count == 3
    attempts = list(delivery.attempts.order_by("number"))
    assert [a.status_code for a in attempts] == [503, 500, 200]
    assert all(a.duration_ms >= 0 for a in attempts)
    # Waits double: the second retry came no sooner than two base units after the first.
    gap1 = receiver.received[1].at - receiver.received[0].at
    gap2 = receiver.received[2].at - receiver.received[1].at
    assert gap1 >= 0.05 and gap2 >= 0.1
    assert len({item.json["delivery_id"] for item in receiver.received}) == 1
    assert len({item.body for item in receiver.received}) == 1


def test_dead_receiver_is_recorded_as_a_network_error_and_4xx_is_final(alice, settings, allow_private):
    from notifications import services

    settings.SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS = 1.0
    dead = services.register_endpoint(owner=alice, url="http://127.0.0.1:9/hook", events=["run.failed"])
    delivery = _delivery(dead)
    services.attempt_delivery(delivery.pk)
    delivery.refresh_from_db()
    assert delivery.state == "pending" and delivery.last_status_code is None
    assert "ConnectionRefused" in delivery.last_error
    assert services.attempt_delivery(delivery.pk) is None  # not due yet: the retry waits its turn


def test_retry_schedule_is_about_a_day(settings):
    """First retry within 30 s, then doubling (capped), giving up about a day after the event."""
    from notifications import outbox

    waits = []
    attempts = 1
    while (wait := outbox.retry_delay(attempts, settings.SKILLRUNNER_WEBHOOK_RETRY_BASE_SECONDS)) is not None:
        waits.append(wait)
        attempts += 1
    assert waits[0] == 30
    assert waits[1:5] == [60, 120, 240, 480]
    assert max(waits) == 6 * 3600
    assert 20 * 3600 <= sum(waits) <= 26 * 3600, sum(waits)


def test_redeliver_sends_again_with_the_same_id(alice, receiver):
    from notifications import services
    from notifications.models import WebhookDelivery

    endpoint = services.register_endpoint(owner=alice, url=receiver.url, events=["run.failed"])
    delivery = _delivery(endpoint)
    services.attempt_delivery(delivery.pk)
    services.redeliver(WebhookDelivery.objects.filter(pk=delivery.pk))  # sync cluster: sent at commit
    assert len(receiver.received) == 2
    assert (
        receiver.received[0].headers["X-SkillRunner-Delivery"] == receiver.received[1].headers["X-SkillRunner-Delivery"]
    )
    delivery.refresh_from_db()
    assert delivery.attempt_count == 2 and delivery.state == "delivered"


def test_a_delivery_task_queued_under_its_old_name_only_delays_the_delivery(alice, receiver):
    """Tasks queued before the webhooks left `runs` name a function that is gone: such a task
    fails without touching the delivery, which is still pending and due, so the supervisor's
    offer sends it under the new name."""
    from django_q.tasks import async_task

    from notifications import services

    endpoint = services.register_endpoint(owner=alice, url=receiver.url, events=["run.failed"])
    delivery = _delivery(endpoint)
    with pytest.raises(ValueError, match="runs.tasks.send_webhook is not defined"):
        async_task("runs.tasks.send_webhook", delivery.pk)  # the sync cluster raises what a worker records
    delivery.refresh_from_db()
    assert delivery.state == "pending" and delivery.attempt_count == 0 and receiver.received == []
    assert services.offer_due_deliveries() == 1
    delivery.refresh_from_db()
    assert delivery.state == "delivered" and len(receiver.received) == 1


def _delivery(endpoint):
    from django.utils import timezone

    from notifications.models import WebhookDelivery

    return WebhookDelivery.objects.create(
        endpoint=endpoint, event="run.failed", payload={"event": "run.failed"}, next_attempt_at=timezone.now()
    )


def test_run_born_from_the_cache_tells_its_callback(api, install_skill, fake_codex, receiver):
    """A cache hit is born succeeded; its callback_url still hears run.succeeded."""
    from tests.support.jobs import create_job, haiku_step

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    create_job(api)
    answer = create_job(api, callback_url=receiver.url)
    assert answer["cache_hit"] is True and answer["status"] == "succeeded"
    assert receiver.events() == ["run.succeeded"]
    assert receiver.received[0].json["request_id"] == answer["request_id"]
    assert verify(
        answer["callback_secret"], receiver.received[0].headers["X-SkillRunner-Signature"], receiver.received[0].body
    )
