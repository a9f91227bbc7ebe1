"""Output repair through the job API (R-RP1, R-RP2), with the scripted fake Codex (a resumable
engine): an invalid final answer goes back to the same session as a new attempt, the run ends
`succeeded` with repair_level "reprompt", or fails as before once the rounds run out.
The real CLIs are in tests/real_engines/test_output_repair_real_engines.py."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.jobs import HAIKU_DATA, HAIKU_TEXT, create_job, haiku_step, process_group_alive, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HAIKU_FILE = {"artifacts/haiku.md": HAIKU_TEXT}
NOT_A_LIST = {**HAIKU_DATA, "haiku": "one line only"}


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


def _invalid(**extra) -> dict:
    return {"files": HAIKU_FILE, "message": json.dumps(NOT_A_LIST), **extra}


def _status(api, rid: str) -> dict:
    return api.get(f"/v1/jobs/{rid}").json()


def _result(api, rid: str) -> dict:
    response = api.get(f"/v1/jobs/{rid}/result")
    assert response.status_code == 200, response.content
    return response.json()["result"]


def _events(api, rid: str) -> list[dict]:
    return api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["events"]


def _codes(warnings: list[dict]) -> list[str]:
    return [w["code"] for w in warnings]


def test_an_invalid_answer_is_repaired_in_one_round_of_the_same_session(api, fake_codex):
    from runs.models import Run

    fake_codex.script(_invalid(), haiku_step())
    rid = create_job(api)["request_id"]

    status = _status(api, rid)
    assert status["status"] == "succeeded", status
    assert (status["attempt_number"], status["repair_round"], status["repair_rounds"]) == (2, 1, 1)
    assert status["interaction_count"] == 0  # a repair round is no user interaction
    assert "OUTPUT_SCHEMA_REPAIR_CONVERGED" in _codes(status["warnings"])
    result = _result(api, rid)
    assert result["data"] == HAIKU_DATA
    assert result["repair_level"] == "reprompt"
    assert "OUTPUT_SCHEMA_REPAIR_CONVERGED" in _codes(result["validation_warnings"])

    first, second = fake_codex.invocations()
    assert second["thread"] == first["thread"] and "resume" in second["argv"]  # the same session, resumed
    assert "`/haiku`: expected a value of type array" in second["prompt"]
    assert '"one line only"' in second["prompt"]
    assert '"haiku_file"' in second["prompt"]  # the output contract restated

    events = _events(api, rid)
    [repair] = [e["payload"] for e in events if e["kind"] == "repair"]
    assert repair["round"] == 1 and repair["max_rounds"] == 2 and repair["attempt"] == 2
    assert repair["error"]["code"] == "OUTPUT_SCHEMA_INVALID"
    assert {"pointer": "/haiku", "expected": "a value of type array", "got": '"one line only"'} in repair["problems"]
    running = [e["payload"] for e in events if e["kind"] == "status" and e["payload"]["to"] == "running"]
    assert [r.get("repair_round") for r in running] == [None, 1]
    assert [e["payload"]["to"] for e in events if e["kind"] == "status"] == [
        "queued",
        "running",
        "queued",
        "running",
        "succeeded",
    ]
    logs = Run.objects.get(pk=rid).records_dir / "logs"
    assert "`/haiku`" in (logs / "attempt-2.prompt.txt").read_text()


def test_a_missing_artifact_is_repaired(api, fake_codex):
    fake_codex.script({"message": json.dumps(HAIKU_DATA)}, haiku_step())
    rid = create_job(api)["request_id"]
    assert _status(api, rid)["status"] == "succeeded"
    assert _result(api, rid)["repair_level"] == "reprompt"
    assert "artifacts/haiku.md" in fake_codex.invocations()[1]["prompt"]


def test_rounds_run_out_the_run_fails_with_the_original_code(api, fake_codex):
    fake_codex.script(_invalid())
    rid = create_job(api, runtime_options={"max_repair_rounds": 1})["request_id"]

    status = _status(api, rid)
    assert status["status"] == "failed"
    assert status["error"]["code"] == "OUTPUT_SCHEMA_INVALID"
    assert status["attempt_number"] == 2
    assert "OUTPUT_SCHEMA_REPAIR_EXHAUSTED" in _codes(status["warnings"])
    result = _result(api, rid)
    assert result["error"]["code"] == "OUTPUT_SCHEMA_INVALID" and result["data"] is None
    assert "OUTPUT_SCHEMA_REPAIR_EXHAUSTED" in _codes(result["validation_warnings"])
    assert len(fake_codex.invocations()) == 2
    assert [e["payload"]["round"] for e in _events(api, rid) if e["kind"] == "repair"] == [1]


def test_default_is_two_rounds(api, fake_codex):
    fake_codex.script(_invalid())
    rid = create_job(api)["request_id"]
    assert _status(api, rid)["error"]["code"] == "OUTPUT_SCHEMA_INVALID"
    assert len(fake_codex.invocations()) == 3


def test_zero_rounds_switch_repair_off(api, fake_codex):
    fake_codex.script(_invalid(), haiku_step())
    rid = create_job(api, runtime_options={"max_repair_rounds": 0})["request_id"]
    status = _status(api, rid)
    assert (status["status"], status["error"]["code"], status["attempt_number"]) == (
        "failed",
        "OUTPUT_SCHEMA_INVALID",
        1,
    )
    assert not {"OUTPUT_SCHEMA_REPAIR_EXHAUSTED", "OUTPUT_SCHEMA_REPAIR_CONVERGED"} & set(_codes(status["warnings"]))
    assert "repair" not in [e["kind"] for e in _events(api, rid)]


def test_a_skill_default_sets_the_rounds(api, fake_codex, install_skill, tmp_path):
    from tests.conftest import BUNDLED_SKILLS
    from tests.support.jobs import clone_skill

    clone = clone_skill(
        BUNDLED_SKILLS / "haiku-writer",
        tmp_path,
        skill_id="haiku-no-repair",
        manifest={"runtime": {"default_options": {"max_repair_rounds": 0}}},
    )
    install_skill(clone.name, root=clone.parent)
    fake_codex.script(_invalid(), haiku_step())
    rid = create_job(api, "haiku-no-repair", input={"topic": "sea"})["request_id"]
    assert _status(api, rid)["status"] == "failed"
    assert len(fake_codex.invocations()) == 1


def test_deterministic_json_repair_comes_first_and_costs_no_round(api, fake_codex):
    """R-RP2: a result in a code fence with text around it is recovered without asking the engine."""
    fake_codex.script(haiku_step(message="Here it is:\n```json\n" + json.dumps(HAIKU_DATA) + "\n```\nEnjoy!"))
    rid = create_job(api)["request_id"]
    status = _status(api, rid)
    assert (status["status"], status["attempt_number"], status["repair_rounds"]) == ("succeeded", 1, 0)
    assert _result(api, rid)["repair_level"] == "deterministic_generic"
    assert len(fake_codex.invocations()) == 1


def test_an_answer_without_json_is_not_repaired(api, fake_codex):
    """Only OUTPUT_SCHEMA_INVALID and ARTIFACT_MISSING start a repair; prose fails at once."""
    fake_codex.script({"message": "I wrote a lovely haiku."}, haiku_step())
    rid = create_job(api)["request_id"]
    assert _status(api, rid)["error"]["code"] == "OUTPUT_MISSING"
    assert len(fake_codex.invocations()) == 1


def test_an_engine_failure_in_a_repair_round_fails_the_run(api, fake_codex):
    fake_codex.script(_invalid(), {"fail": "model overloaded"})
    rid = create_job(api)["request_id"]
    status = _status(api, rid)
    assert (status["status"], status["error"]["code"]) == ("failed", "ENGINE_FAILED")
    assert status["attempt_number"] == 2


def test_hard_timeout_applies_to_a_repair_round(api, fake_codex, settings):
    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 0.5
    fake_codex.script(_invalid(), haiku_step(sleep=30))
    started = time.monotonic()
    rid = create_job(api, runtime_options={"hard_timeout_seconds": 2})["request_id"]
    status = _status(api, rid)
    assert (status["status"], status["error"]["code"], status["attempt_number"]) == ("failed", "TIMEOUT", 2)
    assert time.monotonic() - started < 20


def test_cancel_during_a_repair_round_kills_the_engine(api, probing_codex, manual_dispatch, settings):
    """R-RP2: a repair round respects cancel like any turn."""
    from runs.models import Run

    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0
    probing_codex.fake.script(_invalid(), haiku_step(sleep=60))
    rid = create_job(api)["request_id"]
    manual_dispatch.run_inline(rid, 1)
    run = Run.objects.get(pk=rid)
    assert (run.status, run.attempt_number, run.repair_round, run.holds_slot) == ("queued", 2, 1, False)
    assert (rid, 2) in manual_dispatch.enqueued  # queued for a slot like any turn

    thread = manual_dispatch.run_in_thread(rid, 2)
    assert wait_until(lambda: len(probing_codex.spawns()) == 2 and _status(api, rid)["status"] == "running", 10)
    spawn = probing_codex.spawns()[1]
    assert api.post(f"/v1/jobs/{rid}/cancel").json()["accepted"] is True
    thread.join(timeout=8)
    assert not thread.is_alive()
    assert wait_until(lambda: not process_group_alive(spawn["pgid"]), timeout=3)
    status = _status(api, rid)
    assert (status["status"], status["error"]["code"]) == ("canceled", "CANCELED_BY_USER")
    assert Run.objects.get(pk=rid).holds_slot is False


def test_cancel_while_a_repair_round_waits_for_its_slot(api, fake_codex, manual_dispatch):
    fake_codex.script(_invalid(), haiku_step())
    rid = create_job(api)["request_id"]
    manual_dispatch.run_inline(rid, 1)
    assert api.post(f"/v1/jobs/{rid}/cancel").json()["accepted"] is True
    manual_dispatch.run_inline(rid, 2)  # the queued round is a no-op now
    assert len(fake_codex.invocations()) == 1
    assert _status(api, rid)["status"] == "canceled"


def test_an_exhausted_run_is_never_a_cache_source_a_repaired_one_is(api, fake_codex):
    """R-OP9 with R-RP2: only a succeeded run is reused; a repaired answer is a valid answer.
    max_repair_rounds is part of the cache key, so a run that allows no repair gets none."""
    fake_codex.script(_invalid())
    exhausted = create_job(api)
    assert _status(api, exhausted["request_id"])["status"] == "failed"

    fake_codex.script(_invalid(), haiku_step())
    fresh = create_job(api)
    assert fresh["cache_hit"] is False and _status(api, fresh["request_id"])["status"] == "succeeded"

    assert create_job(api, runtime_options={"max_repair_rounds": 0})["cache_hit"] is False
    reused = create_job(api)
    assert reused["cache_hit"] is True
    result = _result(api, reused["request_id"])
    assert result["data"] == HAIKU_DATA and result["artifacts"] == ["artifacts/haiku.md"]
    assert result["repair_level"] == "reprompt"  # how that answer was obtained, kept with it


# --- interactive runs: only a done-marker answer is repaired, never a question --------------------

PLAN = {
    "destination": "Kyoto",
    "days": [{"day": 1, "activities": ["Fushimi Inari at dawn"]}],
    "plan_file": "artifacts/plan.md",
}
PLAN_FILE = {"artifacts/plan.md": "# Kyoto\n"}
INTERACTIVE = {"execution_mode": "interactive"}


def _plan(marker: bool = True, **changes) -> dict:
    data = {**PLAN, **changes}
    if marker:
        data["__SKILL_DONE__"] = True
    return {"files": PLAN_FILE, "message": json.dumps(data)}


@pytest.fixture
def trip(install_skill):
    install_skill("trip-planner")


def test_interactive_done_answer_that_fails_the_schema_is_repaired(api, trip, fake_codex):
    """R-RP1 where R-LC2 step 2 would fail: the marker came with an invalid output."""
    fake_codex.script(_plan(days="one day in Kyoto"), _plan())
    rid = create_job(api, "trip-planner", input={}, runtime_options=INTERACTIVE)["request_id"]
    status = _status(api, rid)
    assert status["status"] == "succeeded", status
    assert (status["attempt_number"], status["interaction_count"], status["pending_interaction_id"]) == (2, 0, None)
    assert _result(api, rid)["repair_level"] == "reprompt"
    assert '"__SKILL_DONE__": true' in fake_codex.invocations()[1]["prompt"]


def test_interactive_questions_never_trigger_repair(api, trip, fake_codex):
    """A plain-text question and an invalid JSON answer without the marker both wait for the user."""
    fake_codex.script({"message": "Which city?"}, _plan(marker=False, days="a day"), _plan())
    rid = create_job(api, "trip-planner", input={}, runtime_options=INTERACTIVE)["request_id"]
    assert _status(api, rid)["status"] == "waiting_user"
    reply = api.post(f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 1, "response": "Kyoto"}, format="json")
    assert reply.status_code == 200
    status = _status(api, rid)
    assert (status["status"], status["repair_rounds"]) == ("waiting_user", 0)
    assert "repair" not in [e["kind"] for e in _events(api, rid)]
    assert len(fake_codex.invocations()) == 2


def test_repair_rounds_do_not_count_toward_max_attempt(api, trip, fake_codex):
    """trip-planner allows 4 attempts: 3 questions answered, then a done answer repaired twice,
    converges on attempt 6 instead of failing INTERACTIVE_MAX_ATTEMPT_EXCEEDED."""
    fake_codex.script(
        {"message": "Which city?"},
        {"message": "Which season?"},
        {"message": "How many days?"},
        _plan(days="x"),
        _plan(plan_file=3),
        _plan(),
    )
    rid = create_job(api, "trip-planner", input={}, runtime_options=INTERACTIVE)["request_id"]
    for interaction_id in (1, 2, 3):
        assert _status(api, rid)["status"] == "waiting_user"
        api.post(
            f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": interaction_id, "response": "ok"}, format="json"
        )
    status = _status(api, rid)
    assert status["status"] == "succeeded", status
    assert (status["attempt_number"], status["repair_rounds"], status["interaction_count"]) == (6, 2, 3)


def test_a_repair_round_that_asks_a_question_waits_and_the_next_answer_is_no_repair(api, trip, fake_codex):
    fake_codex.script(_plan(days="x"), {"message": "Sorry, how many days exactly?"}, _plan(marker=False))
    rid = create_job(api, "trip-planner", input={}, runtime_options=INTERACTIVE)["request_id"]
    status = _status(api, rid)
    assert (status["status"], status["pending_interaction_id"], status["repair_round"]) == ("waiting_user", 2, 0)
    api.post(f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 2, "response": "one"}, format="json")
    status = _status(api, rid)
    assert status["status"] == "succeeded"
    result = _result(api, rid)
    assert result["repair_level"] == "none"
    assert "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER" in _codes(result["validation_warnings"])
