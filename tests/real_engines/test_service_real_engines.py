"""The real Codex, Gemini CLI, Claude Code, Qwen Code, OpenCode and Kilo driven through the job API against
the scripted model server: tool calls that write artifacts, interactive questions, replies and resumed sessions.

django-q2 runs turns inline in these tests (tests/settings.py), so each POST returns once its turn
is over; the engine, its command line, its home and its output parsing are all the real thing.
"""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile

import pytest
from django.db import connections

from tests.support.scripted_model_server import ScriptedModelServer

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ENGINES = ("codex", "gemini", "claude", "qwen", "opencode", "kilo")
HAIKU = {
    "topic": "autumn sea",
    "haiku": ["grey waves fold", "a gull leans on the wind", "salt on the lantern"],
    "haiku_file": "artifacts/haiku.md",
}
PLAN = {
    "destination": "Kyoto",
    "days": [{"day": 1, "activities": ["Fushimi Inari at dawn"]}],
    "plan_file": "artifacts/plan.md",
}
QUESTION = "Where would you like to go, and in which season?"
WRITE_HAIKU = {
    "shell": "printf 'grey waves fold\\na gull leans on the wind\\nsalt on the lantern\\n' > artifacts/haiku.md"
}


@pytest.fixture
def model_server():
    with ScriptedModelServer() as server:
        yield server


def _status(api, request_id: str) -> dict:
    return api.get(f"/v1/jobs/{request_id}").json()


@pytest.mark.parametrize("engine", ENGINES)
def test_auto_run_with_tool_call_succeeds_with_artifact_in_bundle(
    engine, api, install_skill, real_engine, model_server
):
    install_skill("haiku-writer")
    real_engine(engine)
    model_server.set_script([WRITE_HAIKU, {"text": json.dumps(HAIKU)}])
    created = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": engine, "input": {"topic": "autumn sea"}}, format="json"
    )
    assert created.status_code == 200, created.content
    request_id = created.json()["request_id"]

    status = _status(api, request_id)
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    assert status["status"] == "succeeded", (status, logs["stdout"][-2000:], logs["stderr"][-2000:])
    result = api.get(f"/v1/jobs/{request_id}/result").json()["result"]
    assert result["data"] == HAIKU
    assert result["artifacts"] == ["artifacts/haiku.md"]
    bundle = zipfile.ZipFile(io.BytesIO(b"".join(api.get(f"/v1/jobs/{request_id}/bundle").streaming_content)))
    assert bundle.read("artifacts/haiku.md").decode().splitlines()[1] == "a gull leans on the wind"
    # The model really received the tool's output before it answered, and the skill prompt first.
    turns = [r for r in model_server.requests if r.step_index is not None]
    assert turns[-1].tool_results, "the final model call carried no tool result"
    assert "haiku-writer" in turns[0].latest_user_text
    assert "test-key-not-secret" not in logs["stdout"] + logs["stderr"] + logs["prompt"]


def _reply_when_waiting(api, request_id: str, response: str, deadline: float) -> dict:
    while time.monotonic() < deadline:
        status = _status(api, request_id)
        if status["status"] == "waiting_user":
            pending = api.get(f"/v1/jobs/{request_id}/interaction/pending").json()["pending"]
            reply = api.post(
                f"/v1/jobs/{request_id}/interaction/reply",
                {"interaction_id": pending["interaction_id"], "response": response},
                format="json",
            )
            assert reply.status_code == 200, reply.content
            return pending
        assert status["status"] in ("queued", "running"), status
        time.sleep(0.1)
    raise AssertionError("the run never waited for a reply")


@pytest.mark.parametrize("engine", ENGINES)
def test_interactive_run_asks_waits_resumes_and_finishes_with_done_marker(
    engine, api, install_skill, real_engine, model_server
):
    install_skill("trip-planner")
    real_engine(engine)
    model_server.set_script(
        [
            {"text": QUESTION},
            {"shell": "printf '# Kyoto in autumn\\n' > artifacts/plan.md"},
            {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})},
        ]
    )
    body = {
        "skill_id": "trip-planner",
        "engine": engine,
        "input": {},
        "runtime_options": {"execution_mode": "interactive"},
    }
    responses: list = []

    # A sticky engine (claude) keeps its turn task alive while it waits, so the POST that runs
    # the task inline only returns at the end: run it beside the replying client.
    # Django's test client leaves the request's connection open, so the thread closes its own (a
    # connection left in a finished thread kept the test database from being dropped).
    def create() -> None:
        try:
            responses.append(api.post("/v1/jobs", body, format="json"))
        finally:
            connections.close_all()

    creator = threading.Thread(target=create)
    creator.start()
    deadline = time.monotonic() + 120
    while not api.get("/v1/jobs").json()["results"] and time.monotonic() < deadline:
        time.sleep(0.05)
    request_id = api.get("/v1/jobs").json()["results"][0]["request_id"]

    pending = _reply_when_waiting(api, request_id, "Kyoto, in autumn please", deadline)
    assert pending["prompt"] == QUESTION
    assert pending["interaction_id"] == 1
    creator.join(timeout=max(1, deadline - time.monotonic()))
    while _status(api, request_id)["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.1)

    status = _status(api, request_id)
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    assert status["status"] == "succeeded", (status, logs["stdout"][-2000:], logs["stderr"][-2000:])
    assert status["attempt_number"] == 2 and status["interaction_count"] == 1
    assert "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER" not in json.dumps(status["warnings"])
    assert api.get(f"/v1/jobs/{request_id}/result").json()["result"]["data"] == PLAN
    history = api.get(f"/v1/jobs/{request_id}/interaction/history").json()["interactions"]
    assert [(h["prompt"], h["response"], h["resolution_mode"]) for h in history] == [
        (QUESTION, "Kyoto, in autumn please", "user_reply")
    ]
    # The resumed turn carried the whole conversation: the skill prompt, then the reply.
    last = [r for r in model_server.requests if r.step_index is not None][-1]
    assert "trip-planner" in last.user_texts[0]
    assert "Kyoto, in autumn please" in last.user_texts


def test_qwen_run_effort_and_model_reach_the_model_server(api, install_skill, real_engine, model_server):
    """R-UP4 with the real Qwen Code: the run's effort becomes model.reasoningEffort in its
    settings.json, which the CLI sends as `reasoning.effort`; the listed model is the one asked for."""
    install_skill("haiku-writer")
    real_engine("qwen")
    listed = api.get("/v1/engines/qwen/models").json()["models"]
    model = next(m for m in listed if m["is_default"])
    model_server.set_script([WRITE_HAIKU, {"text": json.dumps(HAIKU)}])
    body = {
        "skill_id": "haiku-writer",
        "engine": "qwen",
        "model": model["id"],
        "provider_id": model["provider_id"],
        "effort": "high",
        "input": {"topic": "autumn sea"},
    }
    created = api.post("/v1/jobs", body, format="json")
    assert created.status_code == 200, created.content
    assert _status(api, created.json()["request_id"])["status"] == "succeeded"
    turns = [r for r in model_server.requests if r.step_index is not None]
    assert len(turns) == 2 and all(turn.model == model["id"] for turn in turns)
    assert all(turn.body["reasoning"] == {"effort": "high"} for turn in turns)
