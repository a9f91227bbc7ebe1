"""Output repair, the pure parts (R-RP1, R-RP2): the problems a failed answer is described by, the
repair prompt built from them, and when a finished turn becomes a repair round."""

from __future__ import annotations

import json

import pytest

from engines.prompt import repair_prompt
from engines.types import TurnResult
from runs.outcome import TurnDecision, decide, schema_problems
from runs.repair import (
    REPAIRING,
    WARNING_CONVERGED,
    WARNING_EXHAUSTED,
    RepairBudget,
    review,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string"},
        "haiku": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3},
        "mood": {"enum": ["calm", "wild"]},
        "haiku_file": {"type": "string", "x-type": "artifact", "x-filename": "haiku.md"},
    },
    "required": ["topic", "haiku", "haiku_file"],
    "additionalProperties": False,
}
SPECS = [{"role": "haiku", "filename": "haiku.md", "required": True, "property": "haiku_file"}]
GOOD = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "artifacts").mkdir()
    return tmp_path


def _decide(run_dir, data, *, mode="auto", marker=False, text=""):
    turn = TurnResult(
        outcome="final", final_data=data, exit_code=0, done_marker_found=marker, assistant_text=text or json.dumps(data)
    )
    return decide(
        mode=mode,
        turn=turn,
        output_schema=SCHEMA,
        artifact_specs=SPECS,
        run_dir=run_dir,
        attempt_number=1,
        max_attempt=None,
        needs_session_handle=True,
    )


def _review(decision, run_dir, *, round=0, max_rounds=2, can_continue=True, mode="auto"):
    return review(
        decision,
        RepairBudget(round=round, max_rounds=max_rounds, can_continue=can_continue),
        output_schema=SCHEMA,
        run_dir=run_dir,
        mode=mode,
    )


# --- problems: JSON pointer, what was expected, what came ----------------------------------------


def test_problems_name_the_pointer_the_expectation_and_an_excerpt():
    data = {"topic": 7, "haiku": "one line only", "mood": "grumpy", "haiku_file": "artifacts/haiku.md"}
    problems = {p["pointer"]: p for p in schema_problems(data, SCHEMA)}
    assert problems["/topic"] == {"pointer": "/topic", "expected": "a value of type string", "got": "7"}
    assert problems["/haiku"]["expected"] == "a value of type array"
    assert problems["/haiku"]["got"] == '"one line only"'
    assert problems["/mood"]["expected"] == 'one of ["calm", "wild"]'


def test_a_missing_required_field_points_at_the_field_itself():
    problems = schema_problems({"topic": "sea", "haiku": ["a", "b", "c"]}, SCHEMA)
    assert problems == [
        {"pointer": "/haiku_file", "expected": "a value (a required field)", "got": "nothing (missing)"}
    ]


def test_unexpected_fields_and_nested_items_get_their_own_pointer():
    data = {**GOOD, "haiku": ["a", 2, "c"], "extra/field": {"deep": True}}
    problems = {p["pointer"]: p for p in schema_problems(data, SCHEMA)}
    assert problems["/haiku/1"]["expected"] == "a value of type string"
    assert problems["/extra~1field"]["expected"].startswith("no such field")
    assert problems["/extra~1field"]["got"] == '{"deep": true}'


def test_the_excerpt_of_a_long_value_is_short_and_on_one_line():
    problems = schema_problems({**GOOD, "topic": ["line\n" * 200]}, SCHEMA)
    got = problems[0]["got"]
    assert len(got) <= 120 and got.endswith("…") and "\n" not in got


def test_a_missing_artifact_points_at_its_field(run_dir):
    decision = _decide(run_dir, GOOD)
    assert decision.error["code"] == "ARTIFACT_MISSING"
    assert decision.problems == [
        {
            "pointer": "/haiku_file",
            "expected": "an existing file artifacts/haiku.md",
            "got": 'no such file (the field says "artifacts/haiku.md")',
        }
    ]


def test_an_answer_without_json_is_one_problem_about_the_whole_answer(run_dir):
    decision = _decide(run_dir, None, text="I wrote the haiku, it is lovely.")
    assert decision.error["code"] == "OUTPUT_MISSING"
    assert decision.problems == [
        {
            "pointer": "",
            "expected": "one JSON object following the output schema",
            "got": '"I wrote the haiku, it is lovely."',
        }
    ]


# --- the repair prompt ----------------------------------------------------------------------------


def _prompt(problems, *, mode="auto", schema=SCHEMA, run_dir="/runs/r1"):
    return repair_prompt(
        problems=problems, output_schema=schema, run_dir=run_dir, mode=mode, round_number=1, max_rounds=2
    )


def test_repair_prompt_lists_every_problem_and_restates_the_contract():
    problems = schema_problems({"topic": "sea", "haiku": "one line only"}, SCHEMA)
    text = _prompt(problems)
    assert "repair round 1 of 2" in text
    assert '- at `/haiku`: expected a value of type array; got "one line only"' in text
    assert "- at `/haiku_file`: expected a value (a required field); got nothing (missing)" in text
    assert json.dumps(SCHEMA) in text  # the whole output schema, as the contract
    assert "/runs/r1/artifacts" in text
    assert "one JSON object" in text
    assert "__SKILL_DONE__" not in text


def test_repair_prompt_of_an_interactive_run_asks_for_the_done_marker():
    text = _prompt([{"pointer": "/topic", "expected": "a value of type string", "got": "7"}], mode="interactive")
    assert '"__SKILL_DONE__": true' in text


def test_repair_prompt_names_the_whole_answer_when_there_was_no_json():
    text = _prompt([{"pointer": "", "expected": "one JSON object following the output schema", "got": '"done!"'}])
    assert '- at the answer as a whole: expected one JSON object following the output schema; got "done!"' in text


def test_repair_prompt_stays_bounded_for_huge_schemas_and_many_problems():
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(2000)}}
    problems = [{"pointer": f"/field_{i}", "expected": "a value of type string", "got": "1"} for i in range(500)]
    text = _prompt(problems, schema=schema)
    assert len(text) < 4000
    assert "… and 480 more" in text
    assert "field_1999" not in text


# --- when a turn becomes a repair round -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "interactive"])
def test_an_invalid_final_answer_becomes_a_repair_round(run_dir, mode):
    decision = _review(_decide(run_dir, {"topic": "sea"}, mode=mode, marker=True), run_dir, mode=mode)
    assert decision.status == REPAIRING
    assert decision.error["code"] == "OUTPUT_SCHEMA_INVALID"
    assert "/haiku" in decision.repair_prompt and "repair round 1 of 2" in decision.repair_prompt


def test_a_missing_artifact_becomes_a_repair_round(run_dir):
    decision = _review(_decide(run_dir, GOOD), run_dir)
    assert decision.status == REPAIRING
    assert "artifacts/haiku.md" in decision.repair_prompt


@pytest.mark.parametrize(
    "budget",
    [
        {"max_rounds": 0},  # repair off
        {"can_continue": False},  # no session to send the prompt to
    ],
)
def test_without_a_round_to_spend_the_run_fails_as_before(run_dir, budget):
    decision = _decide(run_dir, {"topic": "sea"})
    reviewed = _review(decision, run_dir, **budget)
    assert reviewed is decision
    assert reviewed.status == "failed" and reviewed.warnings == []


def test_a_question_or_an_answer_without_json_is_not_repaired(run_dir):
    """R-RP1: never for questions; a first answer holding no JSON at all fails OUTPUT_MISSING at once."""
    question = decide(
        mode="interactive",
        turn=TurnResult(outcome="ask_user", assistant_text="Which sea?", exit_code=0, session_handle="s"),
        output_schema=SCHEMA,
        artifact_specs=SPECS,
        run_dir=run_dir,
        attempt_number=1,
        max_attempt=None,
        needs_session_handle=True,
    )
    assert _review(question, run_dir, mode="interactive").status == "waiting_user"
    assert _review(_decide(run_dir, None, text="done!"), run_dir).status == "failed"


def test_engine_failures_are_never_repaired(run_dir):
    failed = TurnDecision("failed", error={"code": "TIMEOUT", "message": "killed"})
    assert _review(failed, run_dir).status == "failed"
    assert _review(failed, run_dir, round=1).warnings == []


def test_inside_a_round_an_answer_without_json_is_repaired_again(run_dir):
    decision = _review(_decide(run_dir, None, text="Fixed it!"), run_dir, round=1)
    assert decision.status == REPAIRING
    assert "repair round 2 of 2" in decision.repair_prompt


def test_a_valid_answer_in_a_repair_round_converges(run_dir):
    (run_dir / "artifacts" / "haiku.md").write_text("a\nb\nc\n")
    decision = _review(_decide(run_dir, GOOD), run_dir, round=1)
    assert decision.status == "succeeded"
    assert decision.repair_level == "reprompt"
    assert [w["code"] for w in decision.warnings] == [WARNING_CONVERGED]
    envelope = decision.result_envelope()
    assert envelope["repair_level"] == "reprompt"
    assert envelope["validation_warnings"][0]["code"] == WARNING_CONVERGED


def test_a_valid_first_answer_is_no_repair(run_dir):
    (run_dir / "artifacts" / "haiku.md").write_text("a\nb\nc\n")
    decision = _review(_decide(run_dir, GOOD), run_dir)
    assert (decision.status, decision.repair_level, decision.warnings) == ("succeeded", "none", [])


def test_the_last_round_failing_exhausts_the_repair_with_the_original_code(run_dir):
    decision = _review(_decide(run_dir, {"topic": "sea"}), run_dir, round=2, max_rounds=2)
    assert decision.status == "failed"
    assert decision.error["code"] == "OUTPUT_SCHEMA_INVALID"
    assert [w["code"] for w in decision.warnings] == [WARNING_EXHAUSTED]
    assert decision.result_envelope()["status"] == "failed"


def test_a_huge_wrong_answer_stays_cheap_and_its_error_message_short(run_dir):
    """R-FS2: thousands of wrong items cost linear work and a bounded message."""
    decision = _decide(run_dir, {**GOOD, "haiku": list(range(2000))})
    assert decision.error["code"] == "OUTPUT_SCHEMA_INVALID"
    assert len(decision.problems) == 2001  # every item, and maxItems
    assert "… and 1981 more" in decision.error["message"]
    assert len(decision.error["message"]) < 5000
