"""Upstream's conversation streams over the API (SPEC R-UP5): /chat and /chat/history, and the
FCMP form of /events and /events/history beside the service's own, all read from the one event
log of real runs (the scripted fake Codex; turns run inline, so a run is finished or waiting when
POST /v1/jobs returns)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from tests.support.clients import read_event_stream
from tests.support.conversations import ask, ask_envelope, plan_done, start
from tests.support.jobs import create_job, error_code, haiku_step

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def frames(text: str) -> list[tuple[str, dict]]:
    """(event name, data) of every frame of an SSE text, in order."""
    parsed = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if lines:
            assert set(lines) == {"event", "data"}, block  # upstream's frames: no id, no retry
            parsed.append((lines["event"], json.loads(lines["data"])))
    return parsed


def stream(client, path: str, **query) -> list[tuple[str, dict]]:
    response = client.get(path, query)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/event-stream")
    return frames(read_event_stream(response))


def items(streamed: list[tuple[str, dict]]) -> list[dict]:
    assert streamed[0][0] == "snapshot"
    assert {name for name, _ in streamed[1:]} <= {"chat_event"}
    return [data for _, data in streamed[1:]]


def last_seq(client, rid: str) -> int:
    return client.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["last_seq"]


@pytest.fixture
def auto_run(api, install_skill, fake_codex) -> str:
    """A finished auto run that thought, ran a command, answered and succeeded."""
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(reasoning="Five, seven, five.", tools=1))
    return create_job(api)["request_id"]


@pytest.fixture
def waiting_run(api, install_skill, fake_codex) -> str:
    """An interactive run waiting for the answer to its question; answered, it finishes."""
    install_skill("trip-planner")
    fake_codex.script(ask("Where to, and for how long?"), plan_done())
    return start(api)


# ---- /chat -----------------------------------------------------------------------------------


def test_the_chat_of_a_finished_run_from_its_start(api, auto_run):
    streamed = stream(api, f"/v1/jobs/{auto_run}/chat", cursor=0)
    name, snapshot = streamed[0]
    assert name == "snapshot"
    newest = last_seq(api, auto_run)
    assert snapshot == {
        "status": "succeeded",
        "cursor": 0,
        "cursor_floor": 1,
        "cursor_ceiling": newest,
        "replay_source": "audit",
    }
    chat = items(streamed)
    assert [(i["role"], i["kind"]) for i in chat[-2:]] == [
        ("assistant", "assistant_final"),
        ("system", "orchestration_notice"),
    ]
    process = [(i["role"], i["kind"], i["text"]) for i in chat[:-2]]
    # The fake writes its file by a command, thinks, then runs one: each command shows once finished.
    assert process == [
        ("assistant", "assistant_process", "write artifacts/haiku.md"),
        ("assistant", "assistant_process", "Five, seven, five."),
        ("assistant", "assistant_process", "echo step 0"),
    ]
    assert chat[-1]["text"] == "The run succeeded."
    assert all(i["protocol_version"] == "chat-replay/1.0" and i["run_id"] == auto_run for i in chat)
    assert chat[-1]["seq"] == newest  # the run's last event is its end
    assert chat == api.get(f"/v1/jobs/{auto_run}/chat/history").json()["events"]


def test_reconnecting_from_the_last_seq_seen_sends_only_what_followed(api, auto_run):
    chat = items(stream(api, f"/v1/jobs/{auto_run}/chat", cursor=0))
    for seen in chat:
        streamed = stream(api, f"/v1/jobs/{auto_run}/chat", cursor=seen["seq"])
        assert streamed[0][1]["cursor"] == seen["seq"]
        assert items(streamed) == [i for i in chat if i["seq"] > seen["seq"]]
    # Without a cursor upstream's clients start at 0, and so does the stream.
    assert items(stream(api, f"/v1/jobs/{auto_run}/chat")) == chat


def test_the_chat_of_a_waiting_run_ends_at_the_question(api, waiting_run):
    """Upstream ends the stream once the run waits for its user; the client reconnects later."""
    streamed = stream(api, f"/v1/jobs/{waiting_run}/chat", cursor=0)
    assert streamed[0][1]["status"] == "waiting_user"
    assert streamed[0][1]["pending_interaction_id"] == 1
    [question] = items(streamed)
    assert (question["kind"], question["text"]) == ("assistant_final", "Where to, and for how long?")


def test_a_question_asked_by_envelope_reads_as_its_prompt(api, install_skill, fake_codex):
    install_skill("trip-planner")
    body = {"interaction_id": 1, "kind": "choose_one", "prompt": "Kyoto or Lisbon?", "options": ["Kyoto", "Lisbon"]}
    fake_codex.script(ask_envelope(body, prose="Two fine cities."), plan_done())
    rid = start(api)
    [question] = api.get(f"/v1/jobs/{rid}/chat/history").json()["events"]
    assert (question["kind"], question["text"]) == ("assistant_final", "Kyoto or Lisbon?")


# ---- /events in FCMP -------------------------------------------------------------------------


def test_fcmp_events_follow_an_interactive_run_across_its_reply(api, waiting_run):
    before = stream(api, f"/v1/jobs/{waiting_run}/events", cursor=0)
    assert before[0][1]["status"] == "waiting_user" and before[0][1]["pending_interaction_id"] == 1
    asked = items(before)
    assert [e["protocol_version"] for e in asked] == ["fcmp/1.0"] * len(asked)
    question, waiting = asked[-2:]
    assert question["type"] == "user.input.required"
    assert question["data"] == {"interaction_id": 1, "kind": "open_text", "prompt": "Where to, and for how long?"}
    assert waiting["type"] == "conversation.state.changed"
    assert (waiting["data"]["from"], waiting["data"]["to"]) == ("running", "waiting_user")
    assert waiting["data"]["pending_interaction_id"] == 1

    reply = {"interaction_id": 1, "response": "Kyoto, one day"}
    assert api.post(f"/v1/jobs/{waiting_run}/interaction/reply", reply, format="json").status_code == 200
    after = items(stream(api, f"/v1/jobs/{waiting_run}/events", cursor=waiting["seq"]))
    accepted = after[0]
    assert accepted["type"] == "interaction.reply.accepted"
    assert accepted["data"]["response_preview"] == "Kyoto, one day"
    assert accepted["data"]["resolution_mode"] == "user_reply"
    assert accepted["meta"] == {"attempt": 2, "local_seq": 1}
    changes = [(e["data"]["from"], e["data"]["to"]) for e in after if e["type"] == "conversation.state.changed"]
    assert changes == [("waiting_user", "queued"), ("queued", "running"), ("running", "succeeded")]
    assert after[-1]["data"]["terminal"] == {"status": "succeeded", "reason_code": "SUCCEEDED"}
    assert "assistant.message.final" in [e["type"] for e in after]
    assert {e["meta"]["attempt"] for e in after} == {2}

    history = api.get(f"/v1/jobs/{waiting_run}/events/history", {"from_seq": 0}).json()
    assert history["events"] == asked + after
    assert history["count"] == len(asked + after)


def test_a_failed_run_ends_with_its_error(api, install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script({"fail": "the model refused"})
    rid = create_job(api)["request_id"]
    end = items(stream(api, f"/v1/jobs/{rid}/events", cursor=0))[-1]
    terminal = end["data"]["terminal"]
    assert (end["data"]["to"], terminal["status"], terminal["reason_code"]) == ("failed", "failed", "ENGINE_FAILED")
    assert terminal["error"]["category"] == "runtime" and terminal["error"]["code"] == "ENGINE_FAILED"
    assert "the model refused" in terminal["error"]["message"]
    notice = items(stream(api, f"/v1/jobs/{rid}/chat", cursor=0))[-1]
    assert notice["text"].startswith("The run failed: ") and "the model refused" in notice["text"]


def test_a_canceled_run_ends_as_upstreams_cancel(api, install_skill, manual_dispatch):
    install_skill("haiku-writer")
    rid = create_job(api)["request_id"]
    assert api.post(f"/v1/jobs/{rid}/cancel").json()["accepted"] is True
    [end] = items(stream(api, f"/v1/jobs/{rid}/events", cursor=0))  # a new run is no event upstream
    assert (end["data"]["from"], end["data"]["to"], end["data"]["trigger"]) == ("queued", "canceled", "run.canceled")
    assert end["data"]["terminal"]["error"] == {"category": "lifecycle", "code": "CANCELED"}


def test_a_repaired_answer_is_superseded_by_its_repair_round(api, install_skill, fake_codex):
    install_skill("haiku-writer")
    invalid = haiku_step(message=json.dumps({"topic": "sea", "haiku": "one line", "haiku_file": "artifacts/haiku.md"}))
    fake_codex.script(invalid, haiku_step())
    rid = create_job(api)["request_id"]
    envelopes = api.get(f"/v1/jobs/{rid}/events/history", {"from_seq": 1}).json()["events"]
    finals = [e for e in envelopes if e["type"] == "assistant.message.final"]
    [superseded] = [e for e in envelopes if e["type"] == "assistant.message.superseded"]
    assert [f["meta"]["attempt"] for f in finals] == [1, 2]
    assert superseded["meta"]["attempt"] == 1
    assert superseded["data"]["message_id"] == finals[0]["data"]["message_id"]
    assert superseded["data"]["repair_round_index"] == 1
    assert finals[1]["data"]["message_family_id"] == finals[0]["data"]["message_family_id"]
    requeued = [e for e in envelopes if e["type"] == "conversation.state.changed" and e["data"]["to"] == "queued"]
    assert [(e["data"]["trigger"], e["meta"]["attempt"]) for e in requeued] == [("output_repair.started", 2)]


def follow(response, react) -> list[tuple[str, dict]]:
    """The frames of a live stream as they come; `react(chunk)` is awaited after each chunk."""

    async def read() -> str:
        parts: list[str] = []
        async for chunk in response.streaming_content:
            parts.append(chunk.decode() if isinstance(chunk, bytes) else chunk)
            await react(parts[-1])
        return "".join(parts)

    return frames(async_to_sync(asyncio.wait_for)(read(), 20))


def test_a_live_stream_beats_while_it_waits_and_follows_the_run(api, install_skill, fake_codex, manual_dispatch):
    from accounts.models import LiveConnection
    from upstream.streams import ConversationFraming

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]  # queued: its turn runs when the test says so

    async def start_the_turn_once_idle(chunk: str) -> None:
        if chunk.startswith("event: heartbeat") and not manual_dispatch.threads:
            manual_dispatch.run_in_thread(rid)

    ConversationFraming.heartbeat_seconds, saved = 0.1, ConversationFraming.heartbeat_seconds
    try:
        streamed = follow(api.get(f"/v1/jobs/{rid}/events", {"cursor": 0}), start_the_turn_once_idle)
    finally:
        ConversationFraming.heartbeat_seconds = saved
    assert streamed[0] == (
        "snapshot",
        {"status": "queued", "cursor": 0, "cursor_floor": 1, "cursor_ceiling": 1, "replay_source": "audit"},
    )
    assert streamed[1][0] == "heartbeat" and datetime.fromisoformat(streamed[1][1]["ts"]).tzinfo
    envelopes = [data for name, data in streamed if name == "chat_event"]
    assert envelopes[0]["data"]["to"] == "running" and envelopes[-1]["data"]["to"] == "succeeded"
    assert envelopes == api.get(f"/v1/jobs/{rid}/events/history", {"from_seq": 1}).json()["events"]
    assert not LiveConnection.objects.exists()  # the stream gave its connection back


def test_a_stream_ends_with_its_token(api, install_skill, manual_dispatch):
    from accounts.models import ApiToken, LiveConnection
    from accounts.services import revoke_tokens

    install_skill("haiku-writer")
    rid = create_job(api)["request_id"]

    async def revoke_once_open(chunk: str) -> None:
        if chunk.startswith("event: snapshot"):
            await sync_to_async(revoke_tokens)(ApiToken.objects.filter(user=api.user))

    streamed = follow(api.get(f"/v1/jobs/{rid}/chat", {"cursor": 0}), revoke_once_open)
    assert [name for name, _ in streamed] == ["snapshot", "error"]
    assert streamed[-1][1]["code"] == "NOT_AUTHENTICATED"
    assert not LiveConnection.objects.exists()


def test_the_streams_count_as_live_connections(api, auto_run, alice, settings):
    from accounts.connections import close_connection, open_connection

    settings.SKILLRUNNER_USER_MAX_STREAMS = 1
    held = open_connection(alice)
    for path in ("chat", "events"):
        response = api.get(f"/v1/jobs/{auto_run}/{path}", {"cursor": 0})
        assert response.status_code == 429 and error_code(response) == "TOO_MANY_STREAMS", path
    close_connection(held.pk)
    assert items(stream(api, f"/v1/jobs/{auto_run}/chat", cursor=0))


# ---- histories -------------------------------------------------------------------------------


def test_history_ranges_are_inclusive_seqs_and_times(api, waiting_run):
    whole = api.get(f"/v1/jobs/{waiting_run}/events/history", {"from_seq": 1}).json()
    events = whole["events"]
    assert set(whole) == {"request_id", "count", "events", "cursor_floor", "cursor_ceiling", "source"}
    assert (whole["request_id"], whole["count"]) == (waiting_run, len(events))
    assert (whole["cursor_floor"], whole["cursor_ceiling"]) == (1, last_seq(api, waiting_run))
    middle = events[len(events) // 2]

    def seqs(path: str = "events", **query) -> list[int]:
        answer = api.get(f"/v1/jobs/{waiting_run}/{path}/history", query)
        assert answer.status_code == 200, answer.content
        return [e["seq"] for e in answer.json()["events"]]

    assert seqs(from_seq=middle["seq"]) == [e["seq"] for e in events if e["seq"] >= middle["seq"]]
    assert seqs(to_seq=middle["seq"]) == [e["seq"] for e in events if e["seq"] <= middle["seq"]]
    assert seqs(from_seq=middle["seq"], to_seq=middle["seq"]) == [middle["seq"]]
    assert seqs(from_seq=middle["seq"], to_seq=middle["seq"] - 1) == []
    assert seqs(from_seq=10**30) == []
    assert seqs(from_ts=middle["ts"]) == [e["seq"] for e in events if e["ts"] >= middle["ts"]]
    assert seqs(to_ts=middle["ts"]) == [e["seq"] for e in events if e["ts"] <= middle["ts"]]
    naive_utc = datetime.fromisoformat(middle["ts"]).replace(tzinfo=None).isoformat()
    assert seqs(from_ts=naive_utc, to_ts=middle["ts"].replace("+00:00", "Z")) == [middle["seq"]]
    unencoded_plus = middle["ts"].replace("+", " ")  # what `+00:00` becomes in a query string sent as is
    assert seqs(to_ts=unencoded_plus) == seqs(to_ts=middle["ts"])
    chat = api.get(f"/v1/jobs/{waiting_run}/chat/history", {"from_seq": 1}).json()
    assert (chat["count"], chat["cursor_ceiling"]) == (1, whole["cursor_ceiling"])
    assert seqs("chat", to_seq=chat["events"][0]["seq"] - 1) == []


def test_a_long_history_comes_in_pages_that_resume_at_their_ceiling(api, auto_run, monkeypatch):
    whole = api.get(f"/v1/jobs/{auto_run}/events/history", {"from_seq": 1}).json()
    monkeypatch.setattr("upstream.streams.HISTORY_EVENTS", 3)
    pages, ceiling = [], 0
    while ceiling < whole["cursor_ceiling"]:
        page = api.get(f"/v1/jobs/{auto_run}/events/history", {"from_seq": ceiling + 1}).json()
        assert page["cursor_ceiling"] > ceiling
        ceiling = page["cursor_ceiling"]
        pages.append(page["events"])
    assert len(pages) > 2
    assert [e for page in pages for e in page] == whole["events"]
    bounded = api.get(f"/v1/jobs/{auto_run}/events/history", {"from_seq": 1, "to_seq": 2}).json()
    assert bounded["cursor_ceiling"] == 2


def test_todays_forms_are_unchanged(api, auto_run):
    """With `after_seq` (or `Last-Event-ID`) /events and /events/history are the service's own."""
    history = api.get(f"/v1/jobs/{auto_run}/events/history", {"after_seq": 2}).json()
    assert set(history) == {"request_id", "events", "last_seq"}
    assert history["events"][0]["seq"] == 3 and set(history["events"][0]) == {"seq", "kind", "payload", "ts"}
    text = read_event_stream(api.get(f"/v1/jobs/{auto_run}/events", {"after_seq": 2}))
    assert text.startswith("id: 3\nevent: ") and text.endswith("event: end\ndata: {}\n\n")
    assert "chat_event" not in text and "snapshot" not in text
    assert read_event_stream(api.get(f"/v1/jobs/{auto_run}/events", HTTP_LAST_EVENT_ID="2")) == text


# ---- who and what may ask --------------------------------------------------------------------

PATHS = [
    ("chat", {"cursor": 0}),
    ("chat/history", {}),
    ("events", {"cursor": 0}),
    ("events/history", {"from_seq": 1}),
]


def test_someone_elses_run_is_not_found_and_ones_own_always_is(api, bob_api, auto_run):
    for path, query in PATHS:
        for client, rid in ((bob_api, auto_run), (api, str(uuid.uuid4())), (api, "not-a-run")):
            response = client.get(f"/v1/jobs/{rid}/{path}", query)
            assert response.status_code == 404 and error_code(response) == "RUN_NOT_FOUND", (path, rid)
        response = api.get(f"/v1/jobs/{auto_run}/{path}", query)
        assert response.status_code == 200, path
        read_event_stream(response) if response.streaming else response.json()


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "\u00b2", " 3", "0x10", "1e3"])
def test_a_bad_cursor_or_seq_is_400(api, auto_run, value):
    from accounts.models import LiveConnection

    for path, name in (("chat", "cursor"), ("events", "cursor"), ("chat/history", "from_seq")):
        response = api.get(f"/v1/jobs/{auto_run}/{path}", {name: value})
        assert response.status_code == 400 and error_code(response) == "INVALID_CURSOR", (path, value)
    response = api.get(f"/v1/jobs/{auto_run}/events/history", {"to_seq": value})
    assert response.status_code == 400 and error_code(response) == "INVALID_CURSOR"
    assert not LiveConnection.objects.exists()  # refused before it counted


@pytest.mark.parametrize("value", ["yesterday", "2026-13-01T00:00:00", "0001-01-01T00:00:00+14:00", "9" * 40])
def test_a_bad_time_is_400(api, auto_run, value):
    for path in ("chat/history", "events/history"):
        response = api.get(f"/v1/jobs/{auto_run}/{path}", {"from_ts": value})
        assert response.status_code == 400 and error_code(response) == "INVALID_TIMESTAMP", (path, value)


def test_the_openapi_document_describes_both_forms(api):
    paths = api.get("/v1/schema/", {"format": "json"}).json()["paths"]
    assert {"/v1/jobs/{request_id}/chat", "/v1/jobs/{request_id}/chat/history"} <= set(paths)
    names = {p["name"] for p in paths["/v1/jobs/{request_id}/events"]["get"]["parameters"]}
    assert {"after_seq", "cursor"} <= names
    names = {p["name"] for p in paths["/v1/jobs/{request_id}/events/history"]["get"]["parameters"]}
    assert {"after_seq", "from_seq", "to_seq", "from_ts", "to_ts"} <= names
