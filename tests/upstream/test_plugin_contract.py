"""The Zotero plugin's sequence (zotero-agents v0.5.6: `client.ts`, `managementClient.ts`,
`modelCache.ts`, the handshake module), as its client sends it — no credentials at all — against
local mode, with the real Codex and the scripted model server (SPEC §16).

django-q2 runs turns inline here (tests/settings.py): a create or a reply returns once its turn
is over, so the run is finished or waiting when the call returns, as the plugin would see it
after polling.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from rest_framework.test import APIClient

from tests.conftest import BUNDLED_SKILLS
from tests.real_engines.test_service_real_engines import HAIKU, PLAN, QUESTION
from tests.support.clients import read_event_stream
from tests.support.jobs import make_zip, upload, zip_folder
from tests.support.scripted_model_server import ScriptedModelServer

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

HANDSHAKE = {
    "schema": "zotero-agents.skillrunner-handshake.request.v1",
    "client": {"name": "zotero-agents", "version": "0.5.6"},
    "requested_protocols": ["skillrunner.job.v1", "skillrunner.sequence.v1"],
}


@pytest.fixture
def model_server():
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def plugin(settings, install_skill, real_engine) -> APIClient:
    """The plugin's client against `SKILLRUNNER_LOCAL_MODE=true`: no credentials, from loopback."""
    settings.SKILLRUNNER_LOCAL_MODE = True
    settings.SKILLRUNNER_SANDBOX_NETWORK = "provider"
    install_skill("haiku-writer")
    install_skill("trip-planner")
    real_engine("codex")
    return APIClient(REMOTE_ADDR="127.0.0.1")


def _ok(response, status: int = 200):
    assert response.status_code == status, response.content
    return response.json() if response.get("Content-Type", "").startswith("application/json") else response


def _create(plugin, body: dict) -> str:
    # The plugin always sends its model selection: provider_id and effort ("default" when unset).
    base = {"engine": "codex", "provider_id": "openai", "effort": "default", "parameter": {}}
    answer = _ok(plugin.post("/v1/jobs", {**base, **body}, format="json"))
    return answer["request_id"]


def _status(plugin, rid: str) -> dict:
    return _ok(plugin.get(f"/v1/jobs/{rid}"))


def _chat(plugin, rid: str, cursor: int) -> list[dict]:
    """The chat frames after `cursor`; the stream must end by itself (the run rests)."""
    response = plugin.get(f"/v1/jobs/{rid}/chat", {"cursor": cursor}, HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200, response.content
    frames = []
    for block in read_event_stream(response).split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if fields:
            frames.append((fields["event"], json.loads(fields["data"])))
    assert frames[0][0] == "snapshot"
    assert {name for name, _ in frames[1:]} <= {"chat_event"}
    return [data for _, data in frames[1:]]


def _bundle(plugin, rid: str) -> zipfile.ZipFile:
    response = plugin.get(f"/v1/jobs/{rid}/bundle")
    assert response.status_code == 200
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def test_the_plugins_sequence_in_local_mode_without_credentials(plugin, model_server):
    # Capabilities: the handshake, then the engines and the model list.
    handshake = _ok(plugin.post("/v1/system/handshake", HANDSHAKE, format="json"))
    files_protocol = {**HANDSHAKE, "requested_protocols": ["skillrunner.interaction-files.v1"]}
    limits = _ok(plugin.post("/v1/system/handshake", files_protocol, format="json"))["protocols"]
    assert limits["skillrunner.interaction-files.v1"]["supported"] is True
    assert handshake["protocols"]["skillrunner.job.v1"] == {"supported": True}
    assert handshake["protocols"]["skillrunner.sequence.v1"] == {"supported": False}
    assert "codex" in [engine["engine"] for engine in _ok(plugin.get("/v1/engines"))["engines"]]
    models = _ok(plugin.get("/v1/engines/codex/models"))["models"]
    assert {(model["provider_id"], model["deprecated"]) for model in models} == {("openai", False)}

    # An auto run of an installed skill: a tool call writes the artifact, the answer follows.
    model_server.set_script(
        [
            {
                "shell": "printf 'grey waves fold\\na gull leans on the wind\\nsalt on the lantern\\n' > artifacts/haiku.md"
            },
            {"text": json.dumps(HAIKU)},
        ]
    )
    auto = _create(plugin, {"skill_id": "haiku-writer", "input": {"topic": "autumn sea"}})
    assert _status(plugin, auto)["status"] == "succeeded"
    assert _ok(plugin.get(f"/v1/jobs/{auto}/result"))["result"]["data"] == HAIKU
    assert "artifacts/haiku.md" in _bundle(plugin, auto).namelist()

    # A temporary skill run: the package (the bundler's layout: one top folder) with the inputs.
    model_server.set_script([{"text": json.dumps({"lines": 2, "words": 5})}])
    temp = _create(plugin, {"skill_source": "temp_upload", "input": {"document": "document"}})
    assert _status(plugin, temp)["awaiting_upload"] is True
    uploaded = _ok(
        plugin.post(
            f"/v1/jobs/{temp}/upload",
            {
                "skill_package": upload("skill_package.zip", zip_folder(BUNDLED_SKILLS / "word-count")),
                "file": upload("inputs.zip", make_zip({"document": "one two three\nfour five\n"})),
            },
            format="multipart",
        )
    )
    assert uploaded["extracted_files"] == ["document"]
    status = _status(plugin, temp)
    assert (status["status"], status["skill_id"]) == ("succeeded", "word-count")
    assert _ok(plugin.get(f"/v1/jobs/{temp}/result"))["result"]["data"] == {"lines": 2, "words": 5}
    assert "word-count" not in [skill["id"] for skill in _ok(plugin.get("/v1/skills"))]

    # An interactive run: the question, the chat from a cursor, the reply, the resumed session.
    model_server.set_script(
        [
            {"text": QUESTION},
            {"shell": "printf '# Kyoto in autumn\\n' > artifacts/plan.md"},
            {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})},
        ]
    )
    interactive = _create(
        plugin, {"skill_id": "trip-planner", "input": {}, "runtime_options": {"execution_mode": "interactive"}}
    )
    waiting = _status(plugin, interactive)
    assert (waiting["status"], waiting["pending_interaction_id"]) == ("waiting_user", 1)
    chat = _chat(plugin, interactive, 0)
    assert chat and chat[-1]["role"] == "assistant" and QUESTION in chat[-1]["text"]
    seqs = [item["seq"] for item in chat]
    assert seqs == sorted(set(seqs))
    assert _chat(plugin, interactive, seqs[-1]) == []  # reconnecting from the last seq repeats nothing
    history = _ok(plugin.get(f"/v1/jobs/{interactive}/chat/history", {"from_seq": seqs[0]}))
    assert [item["seq"] for item in history["events"]] == seqs
    pending = _ok(plugin.get(f"/v1/jobs/{interactive}/interaction/pending"))["pending"]
    assert (pending["interaction_id"], pending["prompt"]) == (1, QUESTION)
    assert "ui_hints" in pending and pending["default_decision_policy"]
    result_too_soon = plugin.get(f"/v1/jobs/{interactive}/result")
    assert result_too_soon.status_code == 409  # the plugin keeps polling on it
    # The plugin sends typed text as {"text": …}, without an idempotency key.
    reply = _ok(
        plugin.post(
            f"/v1/jobs/{interactive}/interaction/reply",
            {"mode": "interaction", "interaction_id": 1, "response": {"text": "Kyoto, in autumn please"}},
            format="json",
        )
    )
    assert reply["accepted"] is True
    done = _status(plugin, interactive)
    assert (done["status"], done["attempt_number"]) == ("succeeded", 2)
    resumed = [request for request in model_server.requests if request.step_index is not None][-1]
    assert "Kyoto, in autumn please" in resumed.user_texts  # the text itself, not its JSON wrapper
    later = _chat(plugin, interactive, seqs[-1])
    assert [item["kind"] for item in later][0] == "interaction_reply"
    assert later[-1]["kind"] == "orchestration_notice" or later[-1]["role"] in ("assistant", "system")
    assert _ok(plugin.get(f"/v1/jobs/{interactive}/result"))["result"]["data"] == PLAN
    assert "artifacts/plan.md" in _bundle(plugin, interactive).namelist()
    fcmp = _ok(plugin.get(f"/v1/jobs/{interactive}/events/history", {"from_seq": 1}))["events"]
    states = [event["data"]["to"] for event in fcmp if event["type"] == "conversation.state.changed"]
    assert "waiting_user" in states and states[-1] == "succeeded"

    # A reply with an idempotency key, sent twice (a retry): answered once, recorded once.
    # (The scripted model answers each call by its place in the conversation.)
    model_server.set_script(
        [
            {"text": QUESTION},
            {"text": "Which dates? Attach them if you have them written down."},
            {"shell": "cp reply-files/2/dates.txt artifacts/plan.md"},
            {"text": json.dumps({**PLAN, "destination": "Lisbon", "__SKILL_DONE__": True})},
        ]
    )
    keyed = _create(
        plugin, {"skill_id": "trip-planner", "input": {}, "runtime_options": {"execution_mode": "interactive"}}
    )
    assert _status(plugin, keyed)["status"] == "waiting_user"
    body = {"interaction_id": 1, "response": "Lisbon", "idempotency_key": "plugin-retry-1"}
    first = _ok(plugin.post(f"/v1/jobs/{keyed}/interaction/reply", body, format="json"))
    again = _ok(plugin.post(f"/v1/jobs/{keyed}/interaction/reply", body, format="json"))
    assert first["accepted"] is True and again["accepted"] is True
    answered = _ok(plugin.get(f"/v1/jobs/{keyed}/interaction/history"))["interactions"]
    assert [(item["interaction_id"], item["response"]) for item in answered][:1] == [(1, "Lisbon")]
    assert _status(plugin, keyed)["pending_interaction_id"] == 2

    # A reply with a file (skillrunner.interaction-files.v1): the agent reads it in its run.
    files_reply = plugin.post(
        f"/v1/jobs/{keyed}/interaction/reply/files",
        {
            "metadata": json.dumps({"interaction_id": 2, "idempotency_key": "plugin-files-1", "text": "My dates."}),
            "files": [upload("dates.txt", b"3 to 5 October\n")],
        },
        format="multipart",
    )
    assert _ok(files_reply)["accepted"] is True
    assert _status(plugin, keyed)["status"] == "succeeded"
    assert _bundle(plugin, keyed).read("artifacts/plan.md") == b"3 to 5 October\n"
    resumed = [request for request in model_server.requests if request.step_index is not None][-2]
    assert any("reply-files/2/dates.txt" in text for text in resumed.user_texts)

    # Cancel a run still waiting (a new conversation: the script's first answer asks).
    waiting = _create(
        plugin, {"skill_id": "trip-planner", "input": {}, "runtime_options": {"execution_mode": "interactive"}}
    )
    cancel = _ok(plugin.post(f"/v1/jobs/{waiting}/cancel", {}, format="json"))
    assert {key: cancel[key] for key in ("request_id", "run_id", "status", "accepted")} == {
        "request_id": waiting,
        "run_id": waiting,
        "status": "canceled",
        "accepted": True,
    }
    assert cancel["message"]

    # The management dialog's list: every run above, newest first, the local user's own.
    runs = _ok(plugin.get("/v1/management/runs", {"limit": 50}))["runs"]
    assert [(run["request_id"], run["status"]) for run in runs] == [
        (waiting, "canceled"),
        (keyed, "succeeded"),
        (interactive, "succeeded"),
        (temp, "succeeded"),
        (auto, "succeeded"),
    ]
    assert plugin.get("/ui").status_code == 302
