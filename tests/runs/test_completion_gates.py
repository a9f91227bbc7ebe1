"""Completion gates (R-LC1, R-LC2) in the interactive order, and auto mode that never waits.

Turns run inline (django-q2 sync mode): POST /v1/jobs and each reply return once the next turn
is over. The engine is the scripted stand-in codex (tests/support/fake_codex.py).
"""

from __future__ import annotations

import json

import pytest

from tests.support.conversations import (
    AUTO_FRESH,
    HAIKU,
    PLAN,
    PLAN_FILE,
    QUESTION,
    ask,
    ask_envelope,
    haiku_done,
    pending_of,
    plan_done,
    reply,
    result_of,
    start,
    status_of,
    statuses_through,
    warning_codes,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SOFT = "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER"
MAX_ATTEMPT = "INTERACTIVE_MAX_ATTEMPT_EXCEEDED"


def _failed_with(api, request_id: str, code: str) -> dict:
    status = status_of(api, request_id)
    assert status["status"] == "failed", status
    assert status["error"]["code"] == code, status["error"]
    result = result_of(api, request_id)
    assert result["status"] == "failed" and result["data"] is None and result["error"]["code"] == code
    return status


# --- step 1: the engine failed ------------------------------------------------------------------


@pytest.mark.parametrize(
    "step, code",
    [
        pytest.param(ask(exit=3), "ENGINE_FAILED", id="non-zero-exit"),
        pytest.param({"fail": "upstream model overloaded"}, "ENGINE_FAILED", id="turn-failed-event"),
        pytest.param(ask(sleep=30), "TIMEOUT", id="hard-timeout"),
    ],
)
def test_interactive_engine_failure_fails_before_any_other_gate(api, trip, fake_codex, settings, step, code):
    """R-LC2 step 1: a crash, an error event or the hard timeout fails the turn, even when the
    agent's message reads like a question — it never becomes waiting_user."""
    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0
    fake_codex.script(step)
    request_id = start(api, runtime_options={"execution_mode": "interactive", "hard_timeout_seconds": 1})
    _failed_with(api, request_id, code)
    assert "waiting_user" not in statuses_through(api, request_id)
    assert pending_of(api, request_id) is None


def test_message_without_json_is_a_question_not_an_engine_failure(api, trip, fake_codex):
    """R-LC2 step 1 (second sentence): prose without any JSON, exit 0, is a question (step 5)."""
    fake_codex.script(ask("I need to know your budget first. Roughly how much can you spend?"))
    request_id = start(api)
    status = status_of(api, request_id)
    assert status["status"] == "waiting_user" and status["error"] is None


# --- step 2: done marker (strong evidence) --------------------------------------------------------


def test_interactive_done_marker_with_valid_output_succeeds(api, trip, fake_codex):
    """Seed scenario: interactive 模式成功判定 — marker found and output valid → succeeded."""
    fake_codex.script(plan_done(marker=True))
    request_id = start(api)
    status = status_of(api, request_id)
    assert status["status"] == "succeeded", status
    assert SOFT not in warning_codes(status)
    result = result_of(api, request_id)
    assert result["data"] == PLAN  # the marker is stripped before validation and from the data
    assert result["artifacts"] == ["artifacts/plan.md"]


def test_strong_evidence_done_marker_completes_without_waiting(api, trip, fake_codex):
    """Seed scenario: strong evidence 优先完成 — with the marker the run converges on completion,
    never on waiting, even after an earlier question (a standalone marker line counts too)."""
    fake_codex.script(
        ask(), {"files": PLAN_FILE, "message": "Here is your plan:\n" + json.dumps(PLAN) + '\n{"__SKILL_DONE__": true}'}
    )
    request_id = start(api)
    assert status_of(api, request_id)["status"] == "waiting_user"
    assert reply(api, request_id, 1, "Kyoto, one day").status_code == 200
    status = status_of(api, request_id)
    assert status["status"] == "succeeded", status
    assert statuses_through(api, request_id)[-2:] == ["running", "succeeded"]
    assert result_of(api, request_id)["data"] == PLAN


def test_done_marker_wins_over_an_ask_user_envelope_in_the_same_message(api, trip, fake_codex):
    """R-LC2 order: step 2 (marker) comes before any question handling — a final result with the
    marker completes the run even when the message also carries an ask_user envelope."""
    envelope = {"ask_user": {"interaction_id": 1, "prompt": "Anything else?"}}
    fake_codex.script(
        {"files": PLAN_FILE, "message": json.dumps({**PLAN, "__SKILL_DONE__": True}) + "\n" + json.dumps(envelope)}
    )
    request_id = start(api)
    status = status_of(api, request_id)
    assert status["status"] == "succeeded" and status["interaction_count"] == 0, status
    assert result_of(api, request_id)["data"] == PLAN


@pytest.mark.parametrize(
    "step, code",
    [
        pytest.param(
            plan_done(marker=True, data={"destination": "Kyoto", "plan_file": "artifacts/plan.md"}),
            "OUTPUT_SCHEMA_INVALID",
            id="schema-invalid",
        ),
        pytest.param(
            {"message": 'All done, enjoy the trip!\n{"__SKILL_DONE__": true}'}, "OUTPUT_MISSING", id="unparsable-output"
        ),
        pytest.param(plan_done(marker=True, files={}), "ARTIFACT_MISSING", id="required-artifact-missing"),
    ],
)
def test_interactive_done_marker_with_invalid_output_fails_never_waits(api, trip, fake_codex, step, code):
    """Seed scenario: interactive 模式 marker 命中但输出校验失败 — output that does not parse or does
    not validate fails the run and MUST NOT enter waiting_user."""
    fake_codex.script(step)
    request_id = start(api)
    _failed_with(api, request_id, code)
    assert "waiting_user" not in statuses_through(api, request_id)
    assert status_of(api, request_id)["interaction_count"] == 0


# --- step 3: soft completion ----------------------------------------------------------------------


def test_interactive_soft_completion_succeeds_with_warning(api, trip, fake_codex):
    """Seed scenario: interactive 模式软条件成功判定 — no marker, output valid → succeeded with
    warning INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER."""
    fake_codex.script(plan_done(marker=False))
    request_id = start(api)
    status = status_of(api, request_id)
    assert status["status"] == "succeeded", status
    assert SOFT in warning_codes(status)
    result = result_of(api, request_id)
    assert result["data"] == PLAN
    assert SOFT in [w["code"] for w in result["validation_warnings"]]


def test_soft_evidence_completes_with_warning(api, haiku, fake_codex):
    """Seed scenario: soft evidence 可完成并告警 — after a question and a reply, a schema-valid
    answer without the marker completes the run and records the warning (haiku-writer)."""
    fake_codex.script(ask("Which season should the haiku evoke?"), haiku_done(marker=False))
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, "late autumn").status_code == 200
    status = status_of(api, request_id)
    assert status["status"] == "succeeded", status
    assert warning_codes(status).count(SOFT) == 1
    assert result_of(api, request_id)["data"] == HAIKU


def test_soft_completion_reports_stable_warning(api, trip, fake_codex):
    """Seed scenario: 软条件完成返回稳定 warning — the code is the same in the status, the result
    and the event log, with a message."""
    fake_codex.script(plan_done(marker=False))
    request_id = start(api)
    warning = [w for w in status_of(api, request_id)["warnings"] if w["code"] == SOFT]
    assert len(warning) == 1 and warning[0]["message"]
    events = api.get(f"/v1/jobs/{request_id}/events/history?after_seq=0").json()["events"]
    assert [e["payload"]["code"] for e in events if e["kind"] == "warning"] == [SOFT]


def test_soft_completion_not_taken_when_turn_is_a_question_spec_r_lc2_step3(api, trip, fake_codex):
    """SPEC decision R-LC2 step 3 (narrower than the seed's 软条件成功判定, which looks only at the
    schema): schema-valid JSON next to an ask_user envelope is a question, so the run waits."""
    envelope = {"ask_user": {"interaction_id": 1, "kind": "confirm", "prompt": "Shall I book the ryokan as well?"}}
    fake_codex.script({"files": PLAN_FILE, "message": json.dumps(PLAN) + "\n\n" + json.dumps(envelope)})
    request_id = start(api)
    status = status_of(api, request_id)
    assert status["status"] == "waiting_user", status
    assert SOFT not in warning_codes(status)
    assert pending_of(api, request_id)["prompt"] == "Shall I book the ryokan as well?"


# --- step 4: max_attempt ------------------------------------------------------------------------


def _answer_until_attempt(api, request_id: str, attempt: int) -> None:
    for number in range(1, attempt):
        assert status_of(api, request_id)["status"] == "waiting_user"
        assert reply(api, request_id, number, f"answer {number}").status_code == 200


def test_max_attempt_reached_fails_with_interactive_max_attempt_exceeded(api, trip, fake_codex):
    """Seed scenario: 超过最大回合数触发失败 — trip-planner declares max_attempt 4; at attempt 4 with
    neither marker nor soft completion the run fails with INTERACTIVE_MAX_ATTEMPT_EXCEEDED."""
    fake_codex.script(ask("Tell me more?"))
    request_id = start(api)
    _answer_until_attempt(api, request_id, 4)
    status = _failed_with(api, request_id, MAX_ATTEMPT)
    assert status["attempt_number"] == 4
    assert status["interaction_count"] == 3
    assert len(fake_codex.invocations()) == 4


def test_max_attempt_reached_with_valid_ask_user_still_fails(api, trip, fake_codex):
    """R-LC2 step 4: the cap also ends a turn that asked a perfectly valid question."""
    fake_codex.script(
        ask_envelope(
            {"interaction_id": 9, "kind": "choose_one", "prompt": "Train or plane?", "options": ["train", "plane"]}
        )
    )
    request_id = start(api)
    _answer_until_attempt(api, request_id, 4)
    _failed_with(api, request_id, MAX_ATTEMPT)
    assert pending_of(api, request_id) is None


def test_max_attempt_failure_reports_stable_error_code(api, trip, fake_codex):
    """Seed scenario: 超轮次失败返回稳定错误码 — status `failed` and the reason carries the code."""
    fake_codex.script(ask())
    request_id = start(api)
    _answer_until_attempt(api, request_id, 4)
    status = status_of(api, request_id)
    assert status["status"] == "failed"
    assert status["error"] == {"code": MAX_ATTEMPT, "message": status["error"]["message"]}
    assert "4" in status["error"]["message"]


def test_max_attempt_without_completion_evidence_terminates(api, trip, fake_codex):
    """Seed scenario: max_attempt 命中且无完成证据 — only the absence of evidence fails at the cap:
    the same fourth turn with the marker succeeds, and without it but schema-valid soft-completes."""
    fake_codex.script(ask(), ask(), ask(), plan_done(marker=True))
    strong = start(api)
    _answer_until_attempt(api, strong, 4)
    assert status_of(api, strong)["status"] == "succeeded"

    fake_codex.script(ask(), ask(), ask(), plan_done(marker=False))
    soft = start(api)
    _answer_until_attempt(api, soft, 4)
    status = status_of(api, soft)
    assert status["status"] == "succeeded" and SOFT in warning_codes(status)

    fake_codex.script(ask(), ask(), ask(), {"message": json.dumps({"destination": "Kyoto"})})
    bare = start(api)
    _answer_until_attempt(api, bare, 4)
    _failed_with(api, bare, MAX_ATTEMPT)


def test_no_max_attempt_allows_unlimited_turns(api, haiku, fake_codex):
    """Seed scenario: 未声明 max_attempt 允许无限回合 — haiku-writer declares none: turn after turn
    without evidence keeps waiting, never failing on the count."""
    fake_codex.script(ask("And which mood?"))
    request_id = start(api, "haiku-writer")
    for number in range(1, 7):
        status = status_of(api, request_id)
        assert status["status"] == "waiting_user" and status["attempt_number"] == number, status
        assert reply(api, request_id, number, f"answer {number}").status_code == 200
    status = status_of(api, request_id)
    assert status["status"] == "waiting_user" and status["attempt_number"] == 7


# --- step 5 and auto mode ---------------------------------------------------------------------------


def test_unfinished_interactive_turn_enters_waiting_user_with_backend_pending(api, trip, fake_codex):
    """Seed scenario: interactive 回合未完成进入等待态 — no marker, no failure → waiting_user with a
    persisted pending interaction generated by the backend."""
    fake_codex.script(ask())
    request_id = start(api)
    status = status_of(api, request_id)
    assert status["status"] == "waiting_user"
    assert status["pending_interaction_id"] == 1 and status["interaction_count"] == 1
    from runs.models import Interaction

    stored = Interaction.objects.get(run_id=request_id)
    assert stored.prompt == QUESTION and stored.response is None
    assert stored.payload == pending_of(api, request_id)


def test_auto_mode_succeeds_without_done_marker(api, haiku, fake_codex):
    """Seed scenario: auto 模式成功判定 — exit 0 + schema-valid output → succeeded; no marker
    required and no soft-completion warning (that warning is interactive only)."""
    fake_codex.script(haiku_done(marker=False))
    request_id = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    status = status_of(api, request_id)
    assert status["status"] == "succeeded" and status["execution_mode"] == "auto"
    assert status["warnings"] == []
    assert result_of(api, request_id)["data"] == HAIKU


@pytest.mark.parametrize(
    "step",
    [
        pytest.param(ask("Which season should the haiku be about?"), id="plain-question"),
        pytest.param(ask_envelope({"interaction_id": 1, "prompt": "Which season?"}), id="ask-user-envelope"),
        pytest.param({"message": ""}, id="empty-message"),
    ],
)
def test_auto_mode_never_waits(api, haiku, fake_codex, step):
    """R-LC1: what would be a question in interactive mode fails an auto run; it never waits."""
    fake_codex.script(step)
    request_id = start(api, "haiku-writer", runtime_options={"execution_mode": "auto"})
    _failed_with(api, request_id, "OUTPUT_MISSING")
    assert "waiting_user" not in statuses_through(api, request_id)
    assert status_of(api, request_id)["interaction_count"] == 0
