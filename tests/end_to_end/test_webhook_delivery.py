"""Webhook deliveries across real processes (R-NT1): a worker killed in the middle of sending
loses nothing (at least once, same delivery_id), and a receiver that hangs delays neither the
run nor its other deliveries."""

from __future__ import annotations

import json
import signal

import pytest

from tests.support.service_processes import with_fake_codex
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.timeout(180)]

ASK = {"ask_user": {"interaction_id": 1, "kind": "open_text", "prompt": "Where to?"}}
PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord"]}], "plan_file": "artifacts/plan.md"}
DONE = {"message": json.dumps({**PLAN, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}}
# Each attempt may take 3 s per network phase; a dead sender's lease lapses 3 × 3 + 5 = 14 s later.
TIMEOUT_SECONDS = "3"

DELIVERIES = (
    "import json\n"
    "from notifications.models import WebhookDelivery\n"
    "print(json.dumps([{'event': d.event, 'state': d.state, 'delivery_id': str(d.delivery_id),\n"
    "  'attempts': [[a.status_code, a.error] for a in d.attempts.order_by('number')]}\n"
    "  for d in WebhookDelivery.objects.order_by('created_at')]))\n"
)


@pytest.fixture
def live(tmp_path):
    service = with_fake_codex(
        tmp_path,
        {
            "SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE": "true",
            "SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS": TIMEOUT_SECONDS,
        },
    )
    yield service
    service.stop()


def test_worker_killed_mid_delivery_loses_nothing(live):
    with WebhookReceiver(answers=["hang", 200]) as receiver:
        live.fake.script({"message": json.dumps(ASK)}, DONE)
        live.start()
        token = live.token("alice")
        status, hook = live.request("POST", "/v1/webhooks", token, {"url": receiver.url})
        assert status == 201, hook
        request_id = live.start_trip(token)

        # The run.waiting_user delivery is in flight (the receiver holds it): kill the whole worker.
        live.wait_until(lambda: receiver.received, 30, "the first delivery to arrive")
        live.kill(live.workers[0], signal.SIGKILL)
        live.start_worker()

        # The run goes on while that delivery is stuck; its own next event is delivered at once.
        status, _ = live.request(
            "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": 1, "response": "Oslo"}
        )
        assert status == 200
        live.wait_for_status(token, request_id, {"succeeded"}, timeout=60)
        live.wait_until(lambda: "run.succeeded" in receiver.events(), 30, "run.succeeded to be delivered")

        # Once the dead sender's lease lapses, the same delivery is sent again and answered.
        live.wait_until(lambda: receiver.events().count("run.waiting_user") == 2, 60, "the redelivery")

    first, *_, again = [item for item in receiver.received if item.json["event"] == "run.waiting_user"]
    assert first.json["delivery_id"] == again.json["delivery_id"]
    assert first.body == again.body
    deliveries = live.wait_until(
        lambda: (
            (rows := json.loads(live.manage("shell", "-c", DELIVERIES).strip().splitlines()[-1]))
            and all(r["state"] == "delivered" for r in rows)
            and rows
        ),
        30,
        "both deliveries to be recorded as delivered",
    )
    waiting = next(row for row in deliveries if row["event"] == "run.waiting_user")
    (interrupted_code, interrupted_error), (answered_code, _) = waiting["attempts"]
    assert interrupted_code is None and "sender stopped" in interrupted_error
    assert answered_code == 200
    assert [row["event"] for row in deliveries] == ["run.waiting_user", "run.succeeded"]
