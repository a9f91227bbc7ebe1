"""The strict switch and wait deadlines of resumable runs (R-AD4, R-LC9, R-LC10).

session_timeout_sec is 1; deadlines are fired the way the worker's supervisor does it, by calling
runs.supervision.expire_waits() once the deadline passed. The sticky_process half of the table is
in test_sticky_claude.py, the worker-side enforcement across a restart in test_live_worker.py.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from runs.services import AUTO_DECISION_INSTRUCTION
from tests.support.conversations import (
    ask,
    ask_envelope,
    haiku_done,
    history_of,
    plan_done,
    reply,
    start,
    start_deciding_after_a_second,
    status_of,
    statuses_through,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _run(request_id: str):
    from runs.models import Run

    return Run.objects.get(pk=request_id)


def _sleep_past(deadline) -> None:
    time.sleep(max(0.0, (deadline - timezone.now()).total_seconds()) + 0.05)


def test_strict_switch_missing_defaults_to_true(api, trip, fake_codex):
    """Seed scenario: 未显式提供开关 — an interactive run without the switch is strict
    (interactive_require_user_reply=true): no deadline is stored for a resumable wait."""
    fake_codex.script(ask())
    request_id = start(api, runtime_options={"execution_mode": "interactive"})
    run = _run(request_id)
    assert run.runtime_options["interactive_require_user_reply"] is True
    assert run.status == "waiting_user" and run.wait_deadline_at is None
    assert status_of(api, request_id)["wait_deadline_at"] is None


def test_strict_switch_false_is_accepted_with_auto_decide_semantics(api, trip, fake_codex):
    """Seed scenario: 显式关闭严格回复 — strict=false is accepted, and the wait gets a deadline
    (session_timeout_sec later) after which the backend decides."""
    fake_codex.script(ask())
    before = timezone.now()
    request_id = start(
        api,
        runtime_options={
            "execution_mode": "interactive",
            "interactive_require_user_reply": False,
            "session_timeout_sec": 30,
        },
    )
    run = _run(request_id)
    assert run.runtime_options["interactive_require_user_reply"] is False
    assert before + timedelta(seconds=30) <= run.wait_deadline_at <= timezone.now() + timedelta(seconds=30)
    exposed = datetime.fromisoformat(status_of(api, request_id)["wait_deadline_at"].replace("Z", "+00:00"))
    assert exposed == run.wait_deadline_at


def test_resumable_strict_true_keeps_waiting_without_auto_advance(api, trip, fake_codex):
    """Seed scenario: resumable + strict=true — the run does not advance by itself: past
    session_timeout_sec it is still waiting, no turn ran, and it waits until a reply (or cancel)."""
    fake_codex.script(ask(), plan_done())
    started = timezone.now()
    request_id = start(
        api,
        runtime_options={
            "execution_mode": "interactive",
            "interactive_require_user_reply": True,
            "session_timeout_sec": 1,
        },
    )
    assert _run(request_id).wait_deadline_at is None
    _sleep_past(started + timedelta(seconds=1.2))
    from runs.supervision import expire_waits

    assert expire_waits() == 0
    status = status_of(api, request_id)
    assert status["status"] == "waiting_user" and status["attempt_number"] == 1 and status["auto_decision_count"] == 0
    assert len(fake_codex.invocations()) == 1
    assert reply(api, request_id, 1, "Kyoto").status_code == 200
    assert status_of(api, request_id)["status"] == "succeeded"


def test_resumable_strict_false_auto_decides_and_resumes(api, trip, fake_codex):
    """Seed scenario: resumable + strict=false — past the timeout the system generates the
    auto-decision reply and starts a resume turn; the run continues instead of failing. The
    reply tells the agent to go on following default_decision_policy (R-LC10)."""
    from runs.supervision import expire_waits

    fake_codex.script(
        ask_envelope({"interaction_id": 1, "prompt": "Budget?", "default_decision_policy": "cheapest_option"}),
        plan_done(),
    )
    request_id = start(
        api,
        runtime_options={
            "execution_mode": "interactive",
            "interactive_require_user_reply": False,
            "session_timeout_sec": 1,
        },
    )
    deadline = _run(request_id).wait_deadline_at
    assert expire_waits() == 0  # not yet due
    assert status_of(api, request_id)["status"] == "waiting_user"

    _sleep_past(deadline)
    assert expire_waits() == 1
    status = status_of(api, request_id)
    assert status["status"] == "succeeded", status
    assert status["attempt_number"] == 2 and status["auto_decision_count"] == 1
    [record] = history_of(api, request_id)
    expected = AUTO_DECISION_INSTRUCTION.format(policy="cheapest_option")
    assert (record["resolution_mode"], record["response"], record["answered_by"]) == (
        "auto_decide_timeout",
        expected,
        None,
    )
    calls = fake_codex.invocations()
    assert len(calls) == 2
    assert calls[1]["prompt"] == expected and "cheapest_option" in calls[1]["prompt"]
    assert calls[1]["thread"] == calls[0]["thread"]  # a resume of the same session
    assert statuses_through(api, request_id) == ["queued", "running", "waiting_user", "queued", "running", "succeeded"]


def test_auto_decision_names_the_default_policy_when_the_agent_gave_none(api, haiku, fake_codex):
    """R-LC10 with the backend default: the auto-decision follows engine_judgement."""
    from runs.supervision import expire_waits

    fake_codex.script(ask(), haiku_done())
    request_id = start_deciding_after_a_second(api)
    _sleep_past(_run(request_id).wait_deadline_at)
    assert expire_waits() == 1
    assert fake_codex.invocations()[1]["prompt"] == AUTO_DECISION_INSTRUCTION.format(policy="engine_judgement")


def test_each_new_wait_gets_a_fresh_deadline_and_a_reply_clears_it(api, haiku, fake_codex):
    """R-LC9: the deadline belongs to one wait; a reply removes it, the next wait starts anew."""
    from runs.supervision import expire_waits

    fake_codex.script(ask("One?"), ask("Two?"), haiku_done())
    request_id = start_deciding_after_a_second(api)
    first = _run(request_id).wait_deadline_at
    assert reply(api, request_id, 1, "one").status_code == 200
    second = _run(request_id).wait_deadline_at
    assert second is not None and second > first
    assert expire_waits() == 0  # the answered wait's deadline is gone, the new one not due
    _sleep_past(second)
    assert expire_waits() == 1
    status = status_of(api, request_id)
    assert status["status"] == "succeeded" and status["auto_decision_count"] == 1
    assert _run(request_id).wait_deadline_at is None
