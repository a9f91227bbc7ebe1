"""Interactive runs across real process deaths (R-LC9, R-LC13): daphne and `manage.py worker`
subprocesses on one database (tests/support/service_processes.py); workers are SIGKILLed, not mocked."""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime

import pytest

from runs.services import AUTO_DECISION_INSTRUCTION
from tests.support.conversations import PLAN, QUESTION, ask, kill_all, plan_done, process_alive, processes_in
from tests.support.engine_env import engine_binary
from tests.support.fake_codex import FakeCodex
from tests.support.scripted_model_server import ScriptedModelServer
from tests.support.service_processes import ServiceProcesses

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture
def services(tmp_path):
    """Start service processes on demand; every process they started is stopped at the end."""
    started: list[ServiceProcesses] = []

    def make(env: dict[str, str]) -> ServiceProcesses:
        service = ServiceProcesses(tmp_path / f"data-{len(started)}", env=env)
        started.append(service)
        return service

    yield make
    for service in started:
        service.stop()
        runs = service.data_dir / "runs"
        if runs.is_dir():
            for run_dir in runs.iterdir():
                kill_all(processes_in(run_dir))


def _create(live: ServiceProcesses, token: str, engine: str, runtime_options: dict) -> str:
    status, body = live.request(
        "POST",
        "/v1/jobs",
        token,
        {"skill_id": "trip-planner", "engine": engine, "input": {}, "runtime_options": runtime_options},
    )
    assert status == 200, body
    return body["request_id"]


def _history(live: ServiceProcesses, token: str, request_id: str) -> list[dict]:
    status, body = live.request("GET", f"/v1/jobs/{request_id}/interaction/history", token)
    assert status == 200, body
    return body["interactions"]


def test_wait_deadline_survives_worker_restart_and_the_worker_fires_it(services, tmp_path):
    """R-LC9: wait_deadline_at is persisted and enforced by the worker side. The worker dies while a
    non-strict resumable run waits; the deadline passes with no worker at all; the next worker
    recovers the wait (R-LC13 recovered_waiting), fires the deadline by itself, auto-decides
    (R-LC10) and the run finishes."""
    (tmp_path / "engine").mkdir()
    fake = FakeCodex(tmp_path / "engine", tmp_path / "data-0")
    fake.script(ask(), plan_done())
    live = services({"SKILLRUNNER_CODEX_BIN": str(fake.binary)}).start()
    token = live.token("alice")
    request_id = _create(
        live,
        token,
        "codex",
        {"execution_mode": "interactive", "interactive_require_user_reply": False, "session_timeout_sec": 3},
    )
    waiting = live.wait_for_status(token, request_id, {"waiting_user", "failed", "succeeded"})
    assert waiting["status"] == "waiting_user", waiting
    deadline = datetime.fromisoformat(waiting["wait_deadline_at"].replace("Z", "+00:00"))

    live.kill(live.workers[0], signal.SIGKILL)
    time.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds()) + 0.5)
    status = live.request("GET", f"/v1/jobs/{request_id}", token)[1]
    assert (
        status["status"] == "waiting_user" and status["wait_deadline_at"] == waiting["wait_deadline_at"]
    )  # persisted, not yet fired

    live.start_worker()
    done = live.wait_for_status(token, request_id, {"succeeded", "failed", "canceled"}, timeout=60)
    assert done["status"] == "succeeded", (done, live.log("worker-1")[-3000:])
    assert done["auto_decision_count"] == 1 and done["attempt_number"] == 2
    assert done["recovery_state"] == "recovered_waiting"
    [record] = _history(live, token, request_id)
    assert record["resolution_mode"] == "auto_decide_timeout" and record["answered_by"] is None
    prompts = [call["prompt"] for call in fake.invocations()]
    assert prompts[1:] == [AUTO_DECISION_INSTRUCTION.format(policy="engine_judgement")]


def test_sticky_run_whose_worker_was_killed_fails_interaction_process_lost(services):
    """R-LC13: a sticky_process run (real Claude Code) waits with its resident process in a worker
    that is then killed; the next worker fails it with INTERACTION_PROCESS_LOST, no engine process
    is left behind, and the run no longer takes replies."""
    binary = engine_binary("claude")
    if not binary.exists():
        pytest.fail(f"claude CLI not installed at {binary}; run `make engines`", pytrace=False)
    with ScriptedModelServer([{"text": QUESTION}, {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})}]) as server:
        live = services(
            {
                "SKILLRUNNER_CLAUDE_BIN": str(binary),
                "SKILLRUNNER_CLAUDE_BASE_URL": server.url,
                "SKILLRUNNER_CLAUDE_API_KEY": "test-key-not-secret",
                "SKILLRUNNER_KILL_GRACE_SECONDS": "1",
            }
        ).start()
        token = live.token("alice")
        request_id = _create(live, token, "claude", {"execution_mode": "interactive"})
        waiting = live.wait_for_status(token, request_id, {"waiting_user", "failed", "succeeded"})
        assert waiting["status"] == "waiting_user", (waiting, live.log("worker-0")[-3000:])
        assert waiting["interactive_profile"] == "sticky_process"
        run_dir = live.data_dir / "runs" / request_id
        engine = processes_in(run_dir)
        assert engine, "the resident claude process should be alive while the run waits"

        live.kill(live.workers[0], signal.SIGKILL)
        live.start_worker()
        failed = live.wait_for_status(token, request_id, {"failed", "succeeded", "canceled"}, timeout=60)
        assert failed["status"] == "failed", failed
        assert failed["error"]["code"] == "INTERACTION_PROCESS_LOST"
        assert failed["recovery_state"] == "failed_reconciled"
        live.wait_until(
            lambda: not any(process_alive(pid) for pid in engine), 20, "the resident engine process to be gone"
        )
        code, body = live.request(
            "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": 1, "response": "Kyoto"}
        )
        assert code == 409, body


def test_sticky_run_interrupted_in_a_resumed_turn_has_its_engine_killed(services):
    """R-LC13: the worker dies while a sticky_process run's *second* turn is running (the resident
    process is busy with a slow model call). The next worker fails the run with
    ORCHESTRATOR_RESTART_INTERRUPTED and kills the orphaned engine process group — the engine must
    not keep working (model calls, files in the run directory) for a run that is already over."""
    binary = engine_binary("claude")
    if not binary.exists():
        pytest.fail(f"claude CLI not installed at {binary}; run `make engines`", pytrace=False)
    with ScriptedModelServer([{"text": QUESTION}, {"text": "still thinking", "delay": 40}]) as server:
        live = services(
            {
                "SKILLRUNNER_CLAUDE_BIN": str(binary),
                "SKILLRUNNER_CLAUDE_BASE_URL": server.url,
                "SKILLRUNNER_CLAUDE_API_KEY": "test-key-not-secret",
                "SKILLRUNNER_KILL_GRACE_SECONDS": "1",
            }
        ).start()
        token = live.token("alice")
        request_id = _create(live, token, "claude", {"execution_mode": "interactive"})
        assert (
            live.wait_for_status(token, request_id, {"waiting_user", "failed", "succeeded"})["status"] == "waiting_user"
        )
        engine = processes_in(live.data_dir / "runs" / request_id)
        assert engine
        code, body = live.request(
            "POST", f"/v1/jobs/{request_id}/interaction/reply", token, {"interaction_id": 1, "response": "Kyoto"}
        )
        assert code == 200 and body["status"] == "running", body
        live.wait_until(
            lambda: len([r for r in server.requests if r.step_index == 1]) >= 1, 30, "the resumed turn's model call"
        )

        live.kill(live.workers[0], signal.SIGKILL)
        live.start_worker()
        failed = live.wait_for_status(token, request_id, {"failed", "succeeded", "canceled"}, timeout=60)
        assert failed["error"]["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED", failed
        # Well before the 40 s model call would have ended on its own.
        live.wait_until(
            lambda: not any(process_alive(pid) for pid in engine), 10, "the orphaned engine process to be killed"
        )
