"""Output repair with the REAL Codex, Gemini CLI, Claude Code, Qwen Code, OpenCode and Kilo against the
scripted model server (R-RP1, R-RP2): the first answer fails the output schema, the repair prompt goes to
the same session (a resumed process for Codex, Gemini, Qwen Code, OpenCode and Kilo, the next stdin message of Claude's resident
process) and the fixed answer ends the run `succeeded` with repair_level "reprompt"; an answer
that stays invalid fails as before once the rounds run out; a cancel stops a repair round.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.support.clients import client_for
from tests.support.conversations import processes_in, wait_until

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ENGINES = ("codex", "gemini", "claude", "qwen", "opencode", "kilo")
HAIKU = {
    "topic": "autumn sea",
    "haiku": ["grey waves fold", "a gull leans on the wind", "salt on the lantern"],
    "haiku_file": "artifacts/haiku.md",
}
NOT_A_LIST = {**HAIKU, "haiku": "grey waves fold / a gull leans on the wind / salt on the lantern"}
WRITE_HAIKU = {
    "shell": "printf 'grey waves fold\\na gull leans on the wind\\nsalt on the lantern\\n' > artifacts/haiku.md"
}


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


def _body(engine: str, **options) -> dict:
    return {
        "skill_id": "haiku-writer",
        "engine": engine,
        "input": {"topic": "autumn sea"},
        "runtime_options": {"no_cache": True, **options},
    }


def _finished(api, engine: str, **options) -> tuple[str, dict]:
    """POST a run; with django-q2 inline the POST returns once every round of it is over."""
    created = api.post("/v1/jobs", _body(engine, **options), format="json")
    assert created.status_code == 200, created.content
    request_id = created.json()["request_id"]
    return request_id, api.get(f"/v1/jobs/{request_id}").json()


def _start_in_background(api, body: dict):
    """POST a run from a thread of its own (own client, own connection): with django-q2 inline the
    POST runs every turn of the run, while the test replies or cancels beside it."""
    from django.db import connection

    from runs.models import Run

    client = client_for(api.user)

    def post() -> None:
        try:
            client.post("/v1/jobs", body, format="json")
        finally:
            connection.close()

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, wait_until(lambda: Run.objects.first(), 30, "the run to be created")


def _logs(api, request_id: str) -> str:
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    return logs["stdout"][-2000:] + "\n--- stderr ---\n" + logs["stderr"][-2000:]


def _model_turns(model_server) -> list:
    return [r for r in model_server.requests if r.step_index is not None]


@pytest.mark.parametrize("engine", ENGINES)
def test_real_engine_fixes_an_invalid_answer_in_one_repair_round(engine, api, real_engine, model_server):
    real_engine(engine)
    model_server.set_script([{"text": json.dumps(NOT_A_LIST)}, WRITE_HAIKU, {"text": json.dumps(HAIKU)}])
    request_id, status = _finished(api, engine)

    assert status["status"] == "succeeded", (status, _logs(api, request_id))
    assert (status["attempt_number"], status["repair_rounds"]) == (2, 1)
    result = api.get(f"/v1/jobs/{request_id}/result").json()["result"]
    assert result["repair_level"] == "reprompt"
    assert "OUTPUT_SCHEMA_REPAIR_CONVERGED" in [w["code"] for w in result["validation_warnings"]]
    assert result["data"] == HAIKU and result["artifacts"] == ["artifacts/haiku.md"]
    # One conversation: the last model call carries the skill prompt, the first answer and the
    # repair prompt naming what was wrong.
    last = _model_turns(model_server)[-1]
    assert "haiku-writer" in last.user_texts[0]
    assert "`/haiku`: expected a value of type array" in last.latest_user_text
    assert len(last.user_texts) == 2


@pytest.mark.parametrize("engine", ["codex", "claude"])  # one resumable, one resident: gemini resumes as codex does
def test_real_engine_answer_that_stays_invalid_exhausts_the_rounds(engine, api, real_engine, model_server):
    real_engine(engine)
    model_server.set_script([WRITE_HAIKU, {"text": json.dumps(NOT_A_LIST)}])
    request_id, status = _finished(api, engine, max_repair_rounds=1)

    assert status["status"] == "failed", (status, _logs(api, request_id))
    assert status["error"]["code"] == "OUTPUT_SCHEMA_INVALID"
    assert "OUTPUT_SCHEMA_REPAIR_EXHAUSTED" in [w["code"] for w in status["warnings"]]
    assert (status["attempt_number"], status["repair_rounds"]) == (2, 1)
    assert len({tuple(r.user_texts[:1]) for r in _model_turns(model_server)}) == 1  # one session throughout


@pytest.mark.parametrize("engine", ["codex", "claude"])
def test_real_engine_repair_round_is_canceled(engine, api, real_engine, model_server):
    """R-RP2: a cancel during a repair round stops it at once and leaves no engine process."""
    from runs.models import Run

    real_engine(engine)
    model_server.set_script(
        {
            # "turn": the repair prompt follows a model answer, so counting the whole conversation
            # would pass the delay and answer at once.
            "match": [{"contains": "repair round", "count": "turn", "steps": [{"delay": 60}]}],
            "default": [{"text": json.dumps(NOT_A_LIST)}],
        }
    )

    posted, run = _start_in_background(api, _body(engine))
    wait_until(
        lambda: (r := Run.objects.get(pk=run.pk)).attempt_number == 2 and r.status == "running" and r.engine_pid,
        90,
        "the repair round to run",
    )
    # The cancel lands while the engine waits on the model for its repair answer.
    wait_until(
        lambda: any("repair round" in r.latest_user_text for r in _model_turns(model_server)),
        30,
        "the repair prompt to reach the model",
    )
    assert api.post(f"/v1/jobs/{run.pk}/cancel").json()["accepted"] is True
    posted.join(timeout=30)
    assert not posted.is_alive(), "the turn did not notice the cancel"
    status = api.get(f"/v1/jobs/{run.pk}").json()
    asked = [(r.step_index, r.latest_user_text[:80]) for r in _model_turns(model_server)]
    assert (status["status"], status["error"]["code"]) == ("canceled", "CANCELED_BY_USER"), asked
    assert status["repair_round"] == 1, asked
    assert wait_until(lambda: not processes_in(run.run_dir), 10, "the engine to be gone")


PLAN = {
    "destination": "Kyoto",
    "days": [{"day": 1, "activities": ["Fushimi Inari at dawn"]}],
    "plan_file": "artifacts/plan.md",
}


@pytest.mark.parametrize("engine", ["codex", "claude"])
def test_real_engine_interactive_question_waits_and_a_done_answer_is_repaired(
    engine, api, install_skill, real_engine, model_server
):
    """R-RP1 in interactive runs: invalid JSON without the done marker is a question (it waits, no
    repair); with the marker it is repaired in the same session."""
    install_skill("trip-planner")
    real_engine(engine)
    model_server.set_script(
        [
            {"text": json.dumps({**PLAN, "days": "one day"})},
            {"shell": "printf '# Kyoto\\n' > artifacts/plan.md"},
            {"text": json.dumps({**PLAN, "days": "one day", "__SKILL_DONE__": True})},
            {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})},
        ]
    )
    body = {
        **_body(engine),
        "skill_id": "trip-planner",
        "input": {},
        "runtime_options": {"execution_mode": "interactive"},
    }
    posted, run = _start_in_background(api, body)
    status = wait_until(
        lambda: (s := api.get(f"/v1/jobs/{run.pk}").json())["status"] in ("waiting_user", "failed", "succeeded") and s,
        90,
        "the first turn to end",
    )
    assert status["status"] == "waiting_user", (status, _logs(api, str(run.pk)))
    assert status["repair_rounds"] == 0
    reply = api.post(
        f"/v1/jobs/{run.pk}/interaction/reply", {"interaction_id": 1, "response": "one day"}, format="json"
    )
    assert reply.status_code == 200, reply.content
    status = wait_until(
        lambda: (
            (s := api.get(f"/v1/jobs/{run.pk}").json())["status"] in ("failed", "succeeded", "waiting_user")
            and s["attempt_number"] == 3
            and s
        ),
        90,
        "the repair round to end",
    )
    assert status["status"] == "succeeded", (status, _logs(api, str(run.pk)))
    assert (status["repair_rounds"], status["interaction_count"]) == (1, 1)
    assert api.get(f"/v1/jobs/{run.pk}/result").json()["result"]["repair_level"] == "reprompt"
    posted.join(timeout=30)
