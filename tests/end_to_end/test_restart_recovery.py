"""R-LC13 and R-LC14 with real processes: workers are killed, not mocked."""

from __future__ import annotations

import json
import signal

import pytest

from engines.sandbox import STATE_PREFIX
from tests.support.fake_codex import FakeCodex
from tests.support.processes import processes_in
from tests.support.service_processes import ServiceProcesses

pytestmark = [pytest.mark.timeout(180)]

HAIKU = {"topic": "t", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}
DONE_HAIKU = {"files": {"artifacts/haiku.md": "a\nb\nc\n"}, "message": json.dumps(HAIKU)}


@pytest.fixture
def live(tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "tmp").mkdir()  # the service's temporary folder: its sandbox state, and nobody else's
    fake = FakeCodex(tmp_path / "engine", tmp_path / "data")
    service = ServiceProcesses(
        tmp_path / "data", env={"SKILLRUNNER_CODEX_BIN": str(fake.binary), "TMPDIR": str(tmp_path / "tmp")}
    )
    service.fake = fake
    yield service
    service.stop()


def _create(live, token, skill="haiku-writer", **extra):
    status, body = live.request(
        "POST", "/v1/jobs", token, {"skill_id": skill, "engine": "codex", "input": {"topic": "t"}, **extra}
    )
    assert status == 200, body
    return body["request_id"]


def test_worker_killed_mid_turn_fails_run_and_leaves_no_engine(live, tmp_path):
    """R-LC13 + R-SB3: the engine dies with its worker (the sandbox's die-with-parent; unconfined,
    recovery kills it by its stored pid), and the next worker fails the interrupted run. The
    agent reaches only the provider, so its sandbox keeps the relay's socket in a state folder,
    which the killed worker never removed and the next one does."""
    live.fake.script({"sleep": 60, **DONE_HAIKU})
    service_tmp = tmp_path / ("t" * 100)  # the relay socket's path passes 107 bytes (a socket's most)
    service_tmp.mkdir()
    live.env.update(SKILLRUNNER_SANDBOX_NETWORK="provider", TMPDIR=str(service_tmp))
    live.start()
    token = live.token("alice")
    request_id = _create(live, token)
    live.wait_for_status(token, request_id, {"running"})
    live.wait_until(lambda: live.fake.invocations(), 20, "the engine to start")
    run_dir = tmp_path / "data" / "runs" / request_id
    assert processes_in(run_dir), "the engine should be running in its run directory"
    sandbox_state = list(service_tmp.glob(f"{STATE_PREFIX}*"))
    assert len(sandbox_state) == 1, sandbox_state

    live.kill(live.workers[0], signal.SIGKILL)  # the whole cluster dies
    assert sandbox_state[0].exists(), "nothing closed the killed turn's sandbox"
    live.start_worker()

    status = live.wait_for_status(token, request_id, {"failed"}, timeout=60)
    assert status["error"]["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED"
    assert status["recovery_state"] == "failed_reconciled"
    assert not sandbox_state[0].exists(), "the next worker removes the killed turn's sandbox state"
    live.wait_until(lambda: not processes_in(run_dir), 20, "no engine process to be left")
    assert len(live.fake.invocations()) == 1, "an interrupted turn must never be run again"
    assert not any(service_tmp.iterdir()), "nothing else was left in the temporary folder"


def test_queued_runs_are_dispatched_once_after_the_worker_starts(live):
    live.fake.script(DONE_HAIKU)
    live.start(workers=0)
    token = live.token("alice")
    request_ids = [_create(live, token) for _ in range(3)]
    for request_id in request_ids:
        assert live.request("GET", f"/v1/jobs/{request_id}", token)[1]["status"] == "queued"

    live.start_worker()
    for request_id in request_ids:
        assert live.wait_for_status(token, request_id, {"succeeded", "failed"})["status"] == "succeeded"
    assert len(live.fake.invocations()) == 3


def test_waiting_resumable_run_survives_restart_and_stays_answerable(live):
    live.fake.script(
        {"message": "Where to?"},
        {
            "files": {"artifacts/plan.md": "# plan\n"},
            "message": json.dumps(
                {
                    "destination": "Oslo",
                    "days": [{"day": 1, "activities": ["fjord"]}],
                    "plan_file": "artifacts/plan.md",
                    "__SKILL_DONE__": True,
                }
            ),
        },
    )
    live.start()
    token = live.token("alice")
    request_id = _create(live, token, skill="trip-planner", input={}, runtime_options={"execution_mode": "interactive"})
    live.wait_for_status(token, request_id, {"waiting_user"})

    assert live.readyz() == 200
    live.kill(live.workers[0], signal.SIGKILL)
    # R-OP7: the heartbeat the killed worker left a moment ago never counts.
    assert live.readyz() == 503
    live.kill(live.web, signal.SIGKILL)
    live.start_web()
    live.start_worker()
    # The first 200 comes only after the new worker's start-up recovery.
    live.wait_until(lambda: live.readyz() == 200, 60, "the restarted service to be ready", interval=0.02)
    status = live.request("GET", f"/v1/jobs/{request_id}", token)[1]
    assert status["recovery_state"] == "recovered_waiting", status
    assert status["status"] == "waiting_user" and status["pending_interaction_id"] == 1

    code, body = live.request(
        "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": 1, "response": "Oslo"}
    )
    assert code == 200, body
    assert live.wait_for_status(token, request_id, {"succeeded", "failed"})["status"] == "succeeded"
    prompts = [call["prompt"] for call in live.fake.invocations()]
    assert prompts[-1] == "Oslo" and len(prompts) == 2
