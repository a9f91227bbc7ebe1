"""The task queue refusing work at the moment a run is created or answered (R-OP2 with Redis down,
or any broker error): the run is in the database already, so the client must be told the truth.
Either the request succeeded (the run is queued and the supervisor dispatches it once the broker
is back, `supervise_once`) or it failed with nothing changed. A 500 after a committed change
invites the client to retry, creating a second run."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}


class BrokerDown:
    def __init__(self):
        self.down = True
        self.attempts: list[tuple[str, int]] = []

    def __call__(self, request_id, attempt_number):
        self.attempts.append((str(request_id), attempt_number))
        if self.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        from worker.tasks import execute_turn

        execute_turn(str(request_id), attempt_number)


@pytest.fixture
def broker(monkeypatch, api):
    api.raise_request_exception = False  # answer as the server would, with a status code
    down = BrokerDown()
    monkeypatch.setattr("runs.task_queue.enqueue_turn", down)
    return down


def test_run_created_while_the_broker_is_down(api, install_skill, fake_codex, broker):
    from runs.models import Run
    from runs.supervision import supervise_once

    install_skill("haiku-writer")
    fake_codex.script({"files": {"artifacts/haiku.md": "a\nb\nc\n"}, "message": json.dumps(HAIKU)})
    response = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
    )
    runs = list(Run.objects.all())
    committed = [(str(r.pk), r.status) for r in runs]
    assert response.status_code == 200 or (response.status_code == 503 and not committed), (
        response.status_code,
        "runs in the database:",
        committed,
    )
    if response.status_code == 503:
        return
    assert [str(r.pk) for r in runs] == [response.json()["request_id"]] and runs[0].status == "queued"
    broker.down = False
    supervise_once()
    assert Run.objects.get().status == "succeeded"


def test_reply_while_the_broker_is_down(api, install_skill, fake_codex, broker):
    from runs.models import Run
    from runs.supervision import supervise_once

    install_skill("trip-planner")
    plan = {
        "destination": "Oslo",
        "days": [{"day": 1, "activities": ["walk"]}],
        "plan_file": "artifacts/plan.md",
        "__SKILL_DONE__": True,
    }
    fake_codex.script(
        {"message": "Where to?"}, {"files": {"artifacts/plan.md": "# Oslo\n"}, "message": json.dumps(plan)}
    )
    broker.down = False
    created = api.post(
        "/v1/jobs",
        {
            "skill_id": "trip-planner",
            "engine": "codex",
            "input": {},
            "runtime_options": {"execution_mode": "interactive"},
        },
        format="json",
    )
    rid = created.json()["request_id"]
    assert Run.objects.get(pk=rid).status == "waiting_user"

    broker.down = True
    response = api.post(
        f"/v1/jobs/{rid}/interaction/reply",
        {"interaction_id": 1, "response": "Oslo", "idempotency_key": "r1"},
        format="json",
    )
    run = Run.objects.get(pk=rid)
    unchanged = run.status == "waiting_user" and run.pending_interaction_id == 1
    assert response.status_code == 200 or (response.status_code == 503 and unchanged), (
        response.status_code,
        "run is now",
        run.status,
        run.attempt_number,
    )
    if response.status_code == 503:
        return
    assert run.status == "queued" and run.attempt_number == 2
    broker.down = False
    supervise_once()
    assert Run.objects.get(pk=rid).status == "succeeded"
