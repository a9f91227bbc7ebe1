"""sticky_process runs with the REAL Claude Code CLI against the scripted model server
(R-LC7, R-LC8, R-LC9, R-LC10, R-LC11, R-LC13).

Claude keeps one resident process per run; its turn task stays alive while the run waits, so with
inline django-q2 the POST that creates the run only returns when the run ends: each run here is
created in a background thread (`background_runs`) while the test talks to the API beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest
from django.utils import timezone

from runs.services import AUTO_DECISION_INSTRUCTION
from tests.support.conversations import (
    AUTO_FRESH,
    PLAN,
    QUESTION,
    error_code,
    haiku_done,
    history_of,
    process_alive,
    processes_in,
    reply,
    result_of,
    start,
    status_of,
    wait_until,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

WRITE_PLAN = {"shell": "printf '# Kyoto\\n\\nDay 1: Fushimi Inari at dawn\\n' > artifacts/plan.md"}
FINISH = {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})}


def _run(request_id: str):
    from runs.models import Run

    return Run.objects.get(pk=request_id)


def _engine_processes(request_id: str) -> list[int]:
    pids = processes_in(_run(request_id).run_dir)
    assert pids, "no engine process in the run directory"
    return pids


def _all_gone(pids: list[int]) -> bool:
    return not any(process_alive(pid) for pid in pids)


def _sleep_past(deadline) -> None:
    time.sleep(max(0.0, (deadline - timezone.now()).total_seconds()) + 0.05)


def _turn_requests(server) -> list:
    return [r for r in server.requests if r.step_index is not None]


def test_sticky_process_waiting_user_keeps_its_slot_and_process(
    api, trip, haiku, claude, background_runs, fake_codex, settings
):
    """Seed scenario: sticky_process waiting_user 保持槽位 — the waiting run keeps the only slot
    (a queued run does not start) and stays bound to its original, resident engine process, which then
    answers the next turn."""
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    claude.set_script([{"text": QUESTION}, WRITE_PLAN, FINISH])
    sticky = background_runs(engine="claude")
    status = sticky.wait_for(api, {"waiting_user", "failed", "succeeded"})
    assert status["status"] == "waiting_user", status
    assert status["interactive_profile"] == "sticky_process"
    pids = _engine_processes(sticky.request_id)
    run = _run(sticky.request_id)
    assert run.holds_slot and run.claimed_by
    assert run.engine_pid in pids  # recorded, so recovery can kill it if its worker dies (R-LC13)

    fake_codex.script(haiku_done())
    queued = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    time.sleep(0.5)
    assert status_of(api, queued)["status"] == "queued" and fake_codex.invocations() == []
    assert all(process_alive(pid) for pid in pids), "the engine process must live on while the run waits"
    assert _run(sticky.request_id).holds_slot

    response = reply(api, sticky.request_id, 1, "Kyoto in autumn, one day")
    assert response.status_code == 200 and response.json()["status"] == "running"  # straight back to its process
    status = sticky.wait_for(api, {"succeeded", "failed"})
    assert status["status"] == "succeeded", status
    assert status["attempt_number"] == 2 and status["interaction_count"] == 1
    # The second turn continued the first one's conversation: only the same process has it.
    last = _turn_requests(claude)[-1]
    assert "trip-planner" in last.user_texts[0] and last.latest_user_text == "Kyoto in autumn, one day"

    # Its end freed the slot: the queued run ran then.
    assert wait_until(lambda: status_of(api, queued)["status"] in ("succeeded", "failed"), 30, "the queued run")
    assert status_of(api, queued)["status"] == "succeeded"
    sticky.join()
    wait_until(lambda: _all_gone(pids), 15, "the engine process to end with its run")


def _assert_strict_sticky_timeout(api, claude, background_runs, runtime_options: dict) -> None:
    claude.set_script([{"text": QUESTION}, FINISH])
    sticky = background_runs(engine="claude", runtime_options=runtime_options)
    assert sticky.wait_for(api, {"waiting_user", "failed", "succeeded"})["status"] == "waiting_user"
    pids = _engine_processes(sticky.request_id)
    deadline = _run(sticky.request_id).wait_deadline_at
    assert deadline is not None  # a strict sticky wait does have a deadline

    from runs.supervision import expire_waits

    assert expire_waits() == 0
    _sleep_past(deadline)
    assert all(process_alive(pid) for pid in pids)
    assert expire_waits() == 1
    status = status_of(api, sticky.request_id)
    assert status["status"] == "failed" and status["error"]["code"] == "INTERACTION_WAIT_TIMEOUT", status
    assert result_of(api, sticky.request_id)["error"]["code"] == "INTERACTION_WAIT_TIMEOUT"
    wait_until(lambda: _all_gone(pids), 15, "the resident engine process to be killed")
    sticky.join()
    run = _run(sticky.request_id)
    assert not run.holds_slot and run.engine_pid is None
    assert history_of(api, sticky.request_id)[0]["response"] is None
    assert len(_turn_requests(claude)) == 1  # nothing was sent to the agent after the question


def test_sticky_process_wait_timeout_fails_and_kills_process(api, trip, claude, background_runs):
    """Seed scenario: sticky_process 超时失败 — past wait_deadline_at without a reply the resident
    process is terminated, the run fails, error.code=INTERACTION_WAIT_TIMEOUT."""
    _assert_strict_sticky_timeout(
        api,
        claude,
        background_runs,
        {"execution_mode": "interactive", "interactive_require_user_reply": True, "session_timeout_sec": 1},
    )


def test_sticky_strict_true_times_out_killed_and_failed(api, trip, claude, background_runs):
    """Seed scenario: sticky_process + strict=true — with the switch at its default (true) the
    expired wait kills the process and fails the run with INTERACTION_WAIT_TIMEOUT."""
    _assert_strict_sticky_timeout(
        api, claude, background_runs, {"execution_mode": "interactive", "session_timeout_sec": 1}
    )


def test_sticky_strict_false_writes_auto_decision_to_live_process(api, trip, claude, background_runs):
    """Seed scenario: sticky_process + strict=false — past the timeout the auto-decision is written
    to the resident process (R-LC10: it names default_decision_policy) and the run goes on."""
    envelope = {
        "ask_user": {
            "interaction_id": 1,
            "kind": "choose_one",
            "prompt": "Train or plane?",
            "options": ["train", "plane"],
            "default_decision_policy": "quickest_route",
        }
    }
    claude.set_script([{"text": json.dumps(envelope)}, WRITE_PLAN, FINISH])
    sticky = background_runs(
        engine="claude",
        runtime_options={
            "execution_mode": "interactive",
            "interactive_require_user_reply": False,
            "session_timeout_sec": 1,
        },
    )
    assert sticky.wait_for(api, {"waiting_user", "failed", "succeeded"})["status"] == "waiting_user"
    pids = _engine_processes(sticky.request_id)
    assert status_of(api, sticky.request_id)["pending_interaction_id"] == 1

    from runs.supervision import expire_waits

    _sleep_past(_run(sticky.request_id).wait_deadline_at)
    assert all(process_alive(pid) for pid in pids)
    assert expire_waits() == 1
    status = sticky.wait_for(api, {"succeeded", "failed", "canceled"})
    assert status["status"] == "succeeded", status
    assert status["auto_decision_count"] == 1 and status["attempt_number"] == 2
    expected = AUTO_DECISION_INSTRUCTION.format(policy="quickest_route")
    [record] = history_of(api, sticky.request_id)
    assert (record["resolution_mode"], record["response"], record["answered_by"]) == (
        "auto_decide_timeout",
        expected,
        None,
    )
    # Written to the same live conversation: the agent got it as the next user message after its question.
    requests = _turn_requests(claude)
    assert any(r.latest_user_text == expected for r in requests)
    assert "trip-planner" in requests[-1].user_texts[0]
    assert result_of(api, sticky.request_id)["data"] == PLAN
    sticky.join()


def test_cancel_waiting_sticky_run_kills_its_process(api, trip, claude, background_runs):
    """R-LC11 for sticky_process: cancel in waiting_user ends the resident process and frees the
    slot; a later reply gets 409."""
    claude.set_script([{"text": QUESTION}, FINISH])
    sticky = background_runs(engine="claude")
    assert sticky.wait_for(api, {"waiting_user", "failed", "succeeded"})["status"] == "waiting_user"
    pids = _engine_processes(sticky.request_id)

    response = api.post(f"/v1/jobs/{sticky.request_id}/cancel")
    assert response.json() == {
        "request_id": sticky.request_id,
        "run_id": sticky.request_id,
        "status": "canceled",
        "accepted": True,
        "message": "the run was canceled",
    }
    wait_until(lambda: _all_gone(pids), 15, "the resident engine process to be killed")
    sticky.join()
    status = status_of(api, sticky.request_id)
    assert status["status"] == "canceled" and status["error"]["code"] == "CANCELED_BY_USER"
    assert not _run(sticky.request_id).holds_slot
    late = reply(api, sticky.request_id, 1, "Kyoto")
    assert late.status_code == 409 and error_code(late) == "RUN_NOT_WAITING"
    assert len(_turn_requests(claude)) == 1


def test_sticky_process_that_dies_while_waiting_fails_interaction_process_lost(api, trip, claude, background_runs):
    """R-LC13 (process side): the resident process vanishing while the run waits fails the run with
    INTERACTION_PROCESS_LOST instead of leaving it waiting for a reply nobody can take."""
    claude.set_script([{"text": QUESTION}, FINISH])
    sticky = background_runs(engine="claude")
    assert sticky.wait_for(api, {"waiting_user", "failed", "succeeded"})["status"] == "waiting_user"
    for pid in _engine_processes(sticky.request_id):
        with contextlib.suppress(ProcessLookupError):  # gone with one killed before it (bwrap's --die-with-parent)
            os.kill(pid, signal.SIGKILL)
    status = sticky.wait_for(api, {"failed", "succeeded", "canceled"}, timeout=15)
    assert status["status"] == "failed" and status["error"]["code"] == "INTERACTION_PROCESS_LOST", status
    sticky.join()
    late = reply(api, sticky.request_id, 1, "Kyoto")
    assert late.status_code == 409


def test_a_resident_process_started_in_a_database_outage_has_its_pid_for_the_wait(
    api, trip, claude, background_runs, monkeypatch
):
    """R-LC13: the database away for the pid's record from the resident process's start to its
    first turn's end (at the spawn and at every claim check) does not leave the waiting run
    without it, which recovery needs to kill the process if this worker dies."""
    from django.db import OperationalError

    from runs import services
    from runs.models import Run

    record = services.record_engine_pid
    refused: list[int] = []

    def away_while_the_turn_runs(request_id, attempt_number, worker_id, pid):
        if Run.objects.filter(pk=request_id, status="running").exists():
            refused.append(pid)
            raise OperationalError("server closed the connection unexpectedly")
        record(request_id, attempt_number, worker_id, pid)

    monkeypatch.setattr(services, "record_engine_pid", away_while_the_turn_runs)
    claude.set_script([{"text": QUESTION}, FINISH])
    sticky = background_runs(engine="claude")
    assert sticky.wait_for(api, {"waiting_user", "failed", "succeeded"})["status"] == "waiting_user"
    assert refused, "the outage should have met the process's start"
    assert _run(sticky.request_id).engine_pid == refused[0]
    assert process_alive(refused[0])

    pids = _engine_processes(sticky.request_id)
    api.post(f"/v1/jobs/{sticky.request_id}/cancel")
    wait_until(lambda: _all_gone(pids), 15, "the resident engine process to be killed")
    sticky.join()
