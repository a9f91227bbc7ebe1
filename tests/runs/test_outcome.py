"""runs.outcome.decide: the completion gates of R-LC1 (auto) and R-LC2 (interactive), the pending
payload of R-LC3/R-LC4, artifacts (R-OU1) and the result envelope (R-OU2)."""

from __future__ import annotations

import pytest

from engines.types import FAILURE_ENGINE, FAILURE_SPAWN, FAILURE_TIMEOUT, Interaction, TurnResult
from runs.artifacts import collect_artifacts
from runs.outcome import PLACEHOLDER_PROMPT, build_pending, decide

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "file": {"type": "string", "x-type": "artifact", "x-filename": "out.md"},
    },
    "required": ["answer", "file"],
    "additionalProperties": False,
}
SPECS = [{"role": "out", "filename": "out.md", "required": True, "property": "file"}]
GOOD = {"answer": "42", "file": "artifacts/out.md"}


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "artifacts").mkdir()
    return tmp_path


def _write_artifact(run_dir):
    (run_dir / "artifacts" / "out.md").write_text("# out")


def _decide(run_dir, turn, *, mode="auto", attempt=1, max_attempt=None, needs_handle=True):
    return decide(
        mode=mode,
        turn=turn,
        output_schema=SCHEMA,
        artifact_specs=SPECS,
        run_dir=run_dir,
        attempt_number=attempt,
        max_attempt=max_attempt,
        needs_session_handle=needs_handle,
    )


def _final(data=GOOD, **kwargs) -> TurnResult:
    kwargs.setdefault("exit_code", 0)
    kwargs.setdefault("session_handle", "thread-1")
    return TurnResult(outcome="final", final_data=data, **kwargs)


def _question(text="Which colour?", interaction=None, invalid=False, **kwargs) -> TurnResult:
    kwargs.setdefault("exit_code", 0)
    kwargs.setdefault("session_handle", "thread-1")
    return TurnResult(
        outcome="ask_user", assistant_text=text, interaction=interaction, ask_user_invalid=invalid, **kwargs
    )


# --- auto (R-LC1) ----------------------------------------------------------------------------


def test_auto_success(run_dir):
    _write_artifact(run_dir)
    decision = _decide(run_dir, _final())
    assert decision.status == "succeeded"
    assert decision.data == GOOD
    assert decision.artifacts == ["artifacts/out.md"]
    assert decision.result_envelope() == {
        "status": "success",
        "data": GOOD,
        "artifacts": ["artifacts/out.md"],
        "repair_level": "none",
        "validation_warnings": [],
        "error": None,
    }


@pytest.mark.parametrize(
    "turn,code",
    [
        (TurnResult(outcome="error", failure_reason=FAILURE_TIMEOUT, final_data=GOOD), "TIMEOUT"),
        (
            TurnResult(outcome="error", failure_reason=FAILURE_SPAWN, failure_message="no such file"),
            "ENGINE_SPAWN_FAILED",
        ),
        (TurnResult(outcome="error", failure_reason=FAILURE_ENGINE, failure_message="turn failed"), "ENGINE_FAILED"),
        (TurnResult(outcome="final", final_data=GOOD, exit_code=1), "ENGINE_FAILED"),
        (TurnResult(outcome="final", final_data=GOOD, exit_code=-9), "ENGINE_FAILED"),
    ],
)
@pytest.mark.parametrize("mode", ["auto", "interactive"])
def test_engine_failure_wins_over_any_output(run_dir, turn, code, mode):
    """Step 1 of both gates: a failed engine fails the run, whatever it printed."""
    _write_artifact(run_dir)
    turn.done_marker_found = True
    decision = _decide(run_dir, turn, mode=mode)
    assert decision.status == "failed"
    assert decision.error["code"] == code
    assert decision.error["message"]
    envelope = decision.result_envelope()
    assert envelope["status"] == "failed" and envelope["data"] is None and envelope["error"]["code"] == code


def test_auto_without_json_fails_output_missing(run_dir):
    decision = _decide(run_dir, _final(data=None, assistant_text="done!"))
    assert (decision.status, decision.error["code"]) == ("failed", "OUTPUT_MISSING")


def test_auto_schema_invalid(run_dir):
    _write_artifact(run_dir)
    decision = _decide(run_dir, _final(data={"answer": 42, "file": "artifacts/out.md", "extra": 1}))
    assert decision.error["code"] == "OUTPUT_SCHEMA_INVALID"
    assert "answer" in decision.error["message"] and "extra" in decision.error["message"]


def test_auto_missing_artifact_names_the_file(run_dir):
    decision = _decide(run_dir, _final())
    assert decision.error["code"] == "ARTIFACT_MISSING"
    assert "out.md" in decision.error["message"]


def test_auto_never_waits_even_for_a_question(run_dir):
    """R-LC1: auto mode never enters waiting_user."""
    turn = _question(interaction=Interaction(interaction_id=1, prompt="Which colour?"))
    decision = _decide(run_dir, turn)
    assert decision.status == "failed"
    assert decision.pending is None


def test_auto_needs_no_done_marker_and_no_session(run_dir):
    _write_artifact(run_dir)
    assert _decide(run_dir, _final(session_handle=None)).status == "succeeded"


def test_turn_warnings_are_carried(run_dir):
    _write_artifact(run_dir)
    warning = {"code": "OUTPUT_REPAIRED_GENERIC", "message": "repaired"}
    decision = _decide(run_dir, _final(warnings=[warning], repair_level="deterministic_generic"))
    assert decision.warnings == [warning]
    assert decision.result_envelope()["repair_level"] == "deterministic_generic"
    assert decision.result_envelope()["validation_warnings"] == [warning]


# --- interactive (R-LC2) ---------------------------------------------------------------------


def test_marker_and_valid_output_succeed(run_dir):
    _write_artifact(run_dir)
    decision = _decide(run_dir, _final(done_marker_found=True), mode="interactive")
    assert decision.status == "succeeded"
    assert decision.warnings == []


def test_marker_with_invalid_output_fails_never_waits(run_dir):
    """Step 2: the marker is strong evidence; an invalid output fails, it never waits."""
    decision = _decide(
        run_dir, _final(data={"answer": 1}, done_marker_found=True), mode="interactive", max_attempt=None
    )
    assert decision.status == "failed"
    assert decision.error["code"] == "OUTPUT_SCHEMA_INVALID"
    decision = _decide(run_dir, _final(data=None, done_marker_found=True), mode="interactive")
    assert decision.status == "failed"


def test_soft_completion_without_marker(run_dir):
    """Step 3: schema-valid JSON, no marker, not a question → succeeded with a warning."""
    _write_artifact(run_dir)
    decision = _decide(run_dir, _final(), mode="interactive")
    assert decision.status == "succeeded"
    assert [w["code"] for w in decision.warnings] == ["INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER"]


def test_valid_question_is_not_soft_completion_even_with_valid_data(run_dir):
    _write_artifact(run_dir)
    turn = _question(interaction=Interaction(interaction_id=1, prompt="Sure?"))
    turn.final_data = GOOD
    decision = _decide(run_dir, turn, mode="interactive")
    assert decision.status == "waiting_user"


def test_invalid_output_without_marker_waits(run_dir):
    decision = _decide(run_dir, _final(data={"answer": 1}, assistant_text='{"answer": 1}'), mode="interactive")
    assert decision.status == "waiting_user"


def test_plain_text_message_is_a_question_not_a_failure(run_dir):
    """R-LC2 step 1 note: a message without JSON is a question."""
    decision = _decide(run_dir, _question(text="What city do you live in?"), mode="interactive")
    assert decision.status == "waiting_user"
    assert decision.pending["prompt"] == "What city do you live in?"


def test_max_attempt_reached_fails(run_dir):
    """Step 4: attempt_number >= max_attempt → INTERACTIVE_MAX_ATTEMPT_EXCEEDED, also for a valid question."""
    turn = _question(interaction=Interaction(interaction_id=3, prompt="Again?"))
    decision = _decide(run_dir, turn, mode="interactive", attempt=3, max_attempt=3)
    assert decision.status == "failed"
    assert decision.error["code"] == "INTERACTIVE_MAX_ATTEMPT_EXCEEDED"
    assert _decide(run_dir, turn, mode="interactive", attempt=2, max_attempt=3).status == "waiting_user"
    assert _decide(run_dir, turn, mode="interactive", attempt=50, max_attempt=None).status == "waiting_user"


def test_max_attempt_does_not_block_a_finished_task(run_dir):
    _write_artifact(run_dir)
    decision = _decide(run_dir, _final(done_marker_found=True), mode="interactive", attempt=3, max_attempt=3)
    assert decision.status == "succeeded"


def test_missing_session_handle_fails_resumable_wait(run_dir):
    """R-EN7: a resumable run that must wait without a session id fails SESSION_RESUME_FAILED."""
    turn = _question(session_handle=None)
    decision = _decide(run_dir, turn, mode="interactive", needs_handle=True)
    assert decision.error["code"] == "SESSION_RESUME_FAILED"
    assert (
        _decide(run_dir, _question(session_handle=None), mode="interactive", needs_handle=False).status
        == "waiting_user"
    )


# --- pending payload (R-LC3, R-LC4) --------------------------------------------------------


PENDING_KEYS = {
    "interaction_id",
    "kind",
    "prompt",
    "options",
    "ui_hints",
    "default_decision_policy",
    "required_fields",
    "context",
}


def test_pending_from_a_valid_envelope(run_dir):
    interaction = Interaction(
        interaction_id=1,
        prompt="Pick one",
        kind="choose_one",
        options=[{"label": "A", "value": "a"}],
        default_decision_policy="prefer_first",
    )
    decision = _decide(run_dir, _question(interaction=interaction), mode="interactive", attempt=2)
    pending = decision.pending
    assert set(pending) >= PENDING_KEYS
    assert pending["interaction_id"] == 2  # backend-owned: the attempt number
    assert pending["prompt"] == "Pick one"
    assert pending["kind"] == "choose_one"
    assert pending["options"] == [{"label": "A", "value": "a"}]
    assert pending["default_decision_policy"] == "prefer_first"


def test_invalid_envelope_is_discarded_with_a_warning(run_dir):
    """R-TP5: an invalid envelope never blocks: the backend builds the pending from the message."""
    decision = _decide(run_dir, _question(text="Where to? (envelope broken)", invalid=True), mode="interactive")
    assert decision.status == "waiting_user"
    assert decision.pending["prompt"] == "Where to? (envelope broken)"
    assert decision.pending["kind"] == "open_text"
    assert "ASK_USER_PAYLOAD_INVALID" not in [w["code"] for w in decision.warnings]  # engines.protocol adds it


@pytest.mark.parametrize("text", ["", "   \n "])
def test_placeholder_prompt_is_the_last_resort(run_dir, text):
    pending, _ = build_pending(_question(text=text), attempt_number=1)
    assert pending["prompt"] == PLACEHOLDER_PROMPT
    assert set(pending) >= PENDING_KEYS
    assert pending["default_decision_policy"] == "engine_judgement"


def test_pending_always_has_a_policy_and_an_id(run_dir):
    interaction = Interaction(interaction_id=9, prompt="x", default_decision_policy="")
    pending, _ = build_pending(_question(interaction=interaction), attempt_number=4)
    assert pending["interaction_id"] == 4
    assert pending["default_decision_policy"] == "engine_judgement"
    assert pending["context"].get("agent_interaction_id") == 9


# --- artifacts (R-OU1) -----------------------------------------------------------------------


def test_optional_artifact_may_be_missing(run_dir):
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    decision = decide(
        mode="auto",
        turn=_final(data={"a": "x"}),
        output_schema=schema,
        artifact_specs=[{"role": "r", "filename": "maybe.md", "required": False, "property": None}],
        run_dir=run_dir,
        attempt_number=1,
        max_attempt=None,
        needs_session_handle=True,
    )
    assert decision.status == "succeeded"


def test_artifacts_are_listed_relative_to_the_run_dir(run_dir):
    _write_artifact(run_dir)
    (run_dir / "artifacts" / "sub").mkdir()
    (run_dir / "artifacts" / "sub" / "extra.txt").write_text("x")
    decision = _decide(run_dir, _final())
    assert decision.artifacts == ["artifacts/out.md", "artifacts/sub/extra.txt"]


def test_pointed_file_outside_the_run_dir_is_not_collected(run_dir, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "out.md"
    outside.write_text("x")
    decision = _decide(run_dir, _final(data={**GOOD, "file": str(outside)}))
    assert decision.error["code"] == "ARTIFACT_MISSING"
    assert outside.exists()


def test_pointed_file_is_only_checked_decide_never_moves_it(run_dir):
    """R-OU1: decide() only reads the run dir; the caller collects the pointed file afterwards."""
    (run_dir / "out.md").write_text("# out")
    decision = _decide(run_dir, _final(data={**GOOD, "file": "out.md"}))
    assert decision.status == "succeeded"
    assert (run_dir / "out.md").is_file() and not (run_dir / "artifacts" / "out.md").exists()
    collected = collect_artifacts(decision.data, SPECS, run_dir)
    assert collected.error is None and (run_dir / "artifacts" / "out.md").read_text() == "# out"
