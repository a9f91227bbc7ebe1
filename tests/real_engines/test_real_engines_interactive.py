"""Interactive runs with the REAL Codex, Gemini CLI, Claude Code and Qwen Code against the scripted model
server: a question asked in plain words only (the backend builds the pending from the message,
R-LC4), and a run that finishes without the done marker (soft completion, R-LC2 step 3).

The ask_user + done-marker case is in tests/real_engines/test_service_real_engines.py.
"""

from __future__ import annotations

import json

import pytest

from tests.support.conversations import (
    PLAN,
    history_of,
    pending_of,
    result_of,
    status_of,
    wait_until,
    warning_codes,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ENGINES = ("codex", "gemini", "claude", "qwen")
# The later engines join where what is proven is theirs to prove (live activity, usage); the
# service-level module proves their questions, replies and resumes.
ACTIVITY_ENGINES = (*ENGINES, "opencode", "kilo")
PLAIN_QUESTION = "Before I plan anything: which city would you like to visit, and how many days do you have?"
WRITE_PLAN = {"shell": "printf '# Kyoto\\n\\nDay 1: Fushimi Inari at dawn\\n' > artifacts/plan.md"}


def _logs(api, request_id: str) -> str:
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    return logs["stdout"][-2000:] + "\n--- stderr ---\n" + logs["stderr"][-2000:]


@pytest.mark.parametrize("engine", ENGINES)
def test_real_engine_plain_text_question_gets_backend_built_pending(
    engine, api, trip, real_engine, model_server, background_runs
):
    """R-LC4 with a real CLI: the model asks in plain words, with no ask_user envelope and no JSON;
    the run waits on a pending the backend built from that message, and can be canceled."""
    real_engine(engine)
    model_server.set_script([{"text": PLAIN_QUESTION}])
    run = background_runs(engine=engine)
    status = run.wait_for(api, {"waiting_user", "failed", "succeeded", "canceled"}, timeout=120)
    assert status["status"] == "waiting_user", (status, _logs(api, run.request_id))
    assert "ASK_USER_PAYLOAD_INVALID" not in warning_codes(status)
    pending = pending_of(api, run.request_id)
    assert pending["interaction_id"] == 1
    assert pending["prompt"] == PLAIN_QUESTION
    assert pending["kind"] == "open_text" and pending["options"] == []
    assert pending["default_decision_policy"] == "engine_judgement"
    assert pending["context"]["source"] == "assistant_message"
    assert history_of(api, run.request_id)[0]["prompt"] == PLAIN_QUESTION
    from runs.models import Run

    assert Run.objects.get(pk=run.request_id).session_handle, "the engine's session id must be kept for the resume"

    assert api.post(f"/v1/jobs/{run.request_id}/cancel").json()["accepted"] is True
    run.join(timeout=60)
    assert status_of(api, run.request_id)["status"] == "canceled"


@pytest.mark.parametrize("engine", ENGINES)
def test_real_engine_finishing_without_done_marker_soft_completes(
    engine, api, trip, real_engine, model_server, background_runs
):
    """R-LC2 step 3 with a real CLI: the model writes the artifact and answers with schema-valid
    JSON but no __SKILL_DONE__: succeeded with INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER."""
    real_engine(engine)
    model_server.set_script([WRITE_PLAN, {"text": json.dumps(PLAN)}])
    run = background_runs(engine=engine)
    status = run.wait_for(api, {"waiting_user", "failed", "succeeded", "canceled"}, timeout=120)
    assert status["status"] == "succeeded", (status, _logs(api, run.request_id))
    assert "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER" in warning_codes(status)
    assert status["attempt_number"] == 1 and status["interaction_count"] == 0
    result = result_of(api, run.request_id)
    assert result["data"] == PLAN
    assert result["artifacts"] == ["artifacts/plan.md"]
    assert "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER" in [w["code"] for w in result["validation_warnings"]]
    run.join(timeout=60)


@pytest.mark.parametrize("engine", ENGINES)
def test_real_engine_resumed_turn_that_asks_again_waits_again(
    engine, api, trip, real_engine, model_server, background_runs
):
    """R-EN6/R-EN7 with a real CLI: the reply resumes the engine's session (a new process for
    codex/gemini/qwen, the resident one for claude), the agent asks a second question in plain words, and
    the run waits again on interaction 2 — the resumed turn still reports its session."""
    real_engine(engine)
    model_server.set_script(
        [
            {"text": PLAIN_QUESTION},
            {"text": "And in which season?"},
            WRITE_PLAN,
            {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})},
        ]
    )
    run = background_runs(engine=engine)
    assert run.wait_for(api, {"waiting_user", "failed", "succeeded"}, timeout=120)["status"] == "waiting_user"
    from runs.models import Run

    session = Run.objects.get(pk=run.request_id).session_handle
    response = api.post(
        f"/v1/jobs/{run.request_id}/interaction/reply",
        {"interaction_id": 1, "response": "Kyoto, one day"},
        format="json",
    )
    assert response.status_code == 200, response.content
    status = wait_until(
        lambda: (
            (s := status_of(api, run.request_id))["status"] in ("waiting_user", "failed", "succeeded")
            and s["attempt_number"] == 2
            and s
        ),
        120,
        "the resumed turn to end",
    )
    assert status["status"] == "waiting_user", (status, _logs(api, run.request_id))
    assert pending_of(api, run.request_id)["prompt"] == "And in which season?"
    assert Run.objects.get(pk=run.request_id).session_handle == session
    response = api.post(
        f"/v1/jobs/{run.request_id}/interaction/reply", {"interaction_id": 2, "response": "autumn"}, format="json"
    )
    assert response.status_code == 200, response.content
    status = run.wait_for(api, {"failed", "succeeded", "canceled"}, timeout=120)
    assert status["status"] == "succeeded", (status, _logs(api, run.request_id))
    assert status["attempt_number"] == 3
    last = [r for r in model_server.requests if r.step_index is not None][-1]
    assert {"Kyoto, one day", "autumn"} <= set(last.user_texts)  # one conversation throughout
    run.join(timeout=60)


# The model's tool call blocks until the test drops this file in the run dir (the run's hard
# timeout bounds it). No `timeout` wrapper: it makes its own process group, which Gemini's
# pseudo-terminal then stops.
HOLD_TOOL = {"shell": "until [ -f release.flag ]; do sleep 0.05; done; echo released"}


@pytest.mark.parametrize("engine", ACTIVITY_ENGINES)
def test_real_engine_tool_call_reaches_the_websocket_while_the_turn_runs(
    engine, api, trip, real_engine, model_server, background_runs, settings
):
    """R-AC1 with a real CLI: the `tool` `started` activity event reaches a websocket client while
    the engine still runs the tool — the tool only ends when the test, having received the event,
    releases it. The final answer follows, and the turn's usage is in the status."""
    from asgiref.sync import sync_to_async

    from runs.models import Run
    from tests.support.web_clients import run_async, run_socket, token_headers

    # Socket and turn share this process: the in-memory layer and the event-table watcher carry
    # the event (channels_redis misbehaves across the event loops of one test process). The
    # cross-process Redis path is what `make bench` measures on its scaleout configuration.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    real_engine(engine)
    model_server.set_script([HOLD_TOOL, {"text": PLAIN_QUESTION}])
    run = background_runs(engine=engine, runtime_options={"execution_mode": "interactive", "hard_timeout_seconds": 120})
    run_dir = Run.objects.get(pk=run.request_id).run_dir

    async def scenario() -> tuple[list[dict], str, list[dict]]:
        socket = run_socket(run.request_id, token_headers(api))
        assert (await socket.connect())[0]
        assert (await socket.receive_json_from(10))["type"] == "snapshot"
        before = []
        for _ in range(200):  # bounded: the engine prints a handful of events before the tool
            message = await socket.receive_json_from(120)
            before.append(message)
            payload = message.get("payload") or {}
            if message.get("kind") == "activity" and payload.get("type") == "tool":
                break
        status_then = await sync_to_async(lambda: Run.objects.get(pk=run.request_id).status)()
        (run_dir / "release.flag").touch()
        after = []
        for _ in range(200):
            message = await socket.receive_json_from(120)
            after.append(message)
            if message.get("kind") == "status" and message["payload"]["to"] != "running":
                break
        await socket.disconnect()
        return before, status_then, after

    before, status_then, after = run_async(scenario)
    started = before[-1]["payload"]
    assert (started["type"], started["phase"], started["attempt"]) == ("tool", "started", 1), before
    assert "release.flag" in started["command"]
    assert status_then == "running"
    assert "assistant_message" not in [m.get("kind") for m in before]
    finished = [m["payload"] for m in after if m.get("kind") == "activity" and m["payload"].get("phase") == "finished"]
    assert finished and finished[0]["id"] == started["id"] and "released" in finished[0]["output"]
    assert after[-1]["payload"]["to"] == "waiting_user", after
    usage = status_of(api, run.request_id)["usage"]
    assert usage["turns"][0]["attempt"] == 1 and usage["input_tokens"] and usage["output_tokens"]
    assert api.post(f"/v1/jobs/{run.request_id}/cancel").json()["accepted"] is True
    run.join(timeout=60)
