"""The run websocket (R-UI2): snapshot, replay after a cursor, live tail, replies and cancels."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from runs.models import Interaction, Run
from tests.support.web_clients import (
    QUESTION,
    browser_headers,
    receive_messages,
    receive_until_closed,
    run_async,
    run_socket,
    token_headers,
)

pytestmark = pytest.mark.django_db(transaction=True)

WAITING_EVENT_KINDS = ["status", "status", "assistant_message", "interaction_pending", "status"]


def test_snapshot_then_every_event(api, trip_run):
    request_id = trip_run()

    async def scenario():
        socket = run_socket(request_id, token_headers(api))
        connected, _ = await socket.connect()
        assert connected
        snapshot, *events = await receive_messages(socket, 6)
        await socket.disconnect()
        return snapshot, events

    snapshot, events = run_async(scenario)
    assert snapshot["type"] == "snapshot"
    # The run as GET /v1/jobs/{id} shows it (which adds upstream's optional fields, R-UP10).
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert snapshot["run"] == {key: status[key] for key in snapshot["run"]}
    assert {"status", "usage", "model_tokens", "pending_interaction_id"} <= set(snapshot["run"])
    assert snapshot["pending"]["prompt"] == QUESTION
    assert snapshot["pending"]["interaction_id"] == 1
    assert snapshot["last_seq"] == 5
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert [e["kind"] for e in events] == WAITING_EVENT_KINDS
    assert all(e["type"] == "event" and e["ts"] for e in events)
    assert events[3]["payload"] == snapshot["pending"]


def test_reconnect_after_seq_misses_and_repeats_nothing(api, trip_run):
    """A client that saw seq 3, drops, and reconnects twice gets every event exactly once."""
    request_id = trip_run()

    async def scenario():
        seen = []
        first = run_socket(request_id, token_headers(api), after_seq=3)
        assert (await first.connect())[0]
        snapshot, *events = await receive_messages(first, 3)
        assert snapshot["last_seq"] == 5
        seen += [e["seq"] for e in events]
        assert await first.receive_nothing(0.5)
        await first.disconnect()

        second = run_socket(request_id, token_headers(api), after_seq=seen[-1])
        assert (await second.connect())[0]
        assert (await second.receive_json_from())["type"] == "snapshot"
        assert await second.receive_nothing(0.5)  # nothing new yet: no repeats of 4 and 5
        reply = await sync_to_async(api.post)(
            f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json"
        )
        assert reply.status_code == 200
        messages, code = await receive_until_closed(second)
        seen += [m["seq"] for m in messages]
        return seen, messages, code

    seen, messages, code = run_async(scenario)
    assert seen == list(range(4, messages[-1]["seq"] + 1))  # every seq once (the turn's activity included)
    assert code == 1000  # the run ended and everything was sent
    assert [m["kind"] for m in messages][-2:] == ["result", "status"]
    assert messages[-1]["payload"]["to"] == "succeeded"


def test_finished_run_replays_and_closes(api, trip_run):
    request_id = trip_run()
    api.post(f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json")

    async def scenario():
        socket = run_socket(request_id, token_headers(api), after_seq=9)
        assert (await socket.connect())[0]
        return await receive_until_closed(socket)

    (snapshot, *events), code = run_async(scenario)
    assert snapshot["run"]["status"] == "succeeded"
    assert snapshot["pending"] is None
    last = snapshot["last_seq"]
    assert [e["seq"] for e in events] == list(range(10, last + 1)) and [e["kind"] for e in events][-2:] == [
        "result",
        "status",
    ]
    assert code == 1000


def test_reply_over_the_socket_goes_through_services(alice, api, trip_run):
    request_id = trip_run()
    headers = browser_headers(alice)

    async def scenario():
        socket = run_socket(request_id, headers, after_seq=5)
        assert (await socket.connect())[0]
        await socket.receive_json_from()
        await socket.send_json_to({"type": "reply", "interaction_id": 1, "response": "Oslo", "idempotency_key": "k-1"})
        messages, code = await receive_until_closed(socket)
        return messages, code

    messages, code = run_async(scenario)
    ack = next(m for m in messages if m["type"] == "ack")
    assert ack == {"type": "ack", "action": "reply", "request_id": request_id, "status": "queued", "accepted": True}
    replies = [m for m in messages if m.get("kind") == "interaction_reply"]
    assert [r["payload"]["response"] for r in replies] == ["Oslo"]
    interaction = Interaction.objects.get(run_id=request_id)
    assert (interaction.response, interaction.answered_by, interaction.idempotency_key) == ("Oslo", alice, "k-1")
    assert interaction.resolution_mode == "user_reply"
    assert Run.objects.get(pk=request_id).status == "succeeded"
    assert code == 1000


def test_cancel_over_the_socket(api, trip_run):
    request_id = trip_run()

    async def scenario():
        socket = run_socket(request_id, token_headers(api), after_seq=5)
        assert (await socket.connect())[0]
        await socket.receive_json_from()
        await socket.send_json_to({"type": "cancel"})
        return await receive_until_closed(socket)

    messages, code = run_async(scenario)
    ack = next(m for m in messages if m["type"] == "ack")
    assert ack["action"] == "cancel" and ack["accepted"] is True and ack["status"] == "canceled"
    assert messages[-1]["payload"]["to"] == "canceled"
    run = Run.objects.get(pk=request_id)
    assert run.status == "canceled" and run.error["code"] == "CANCELED_BY_USER"


def test_errors_carry_the_rest_codes(api, trip_run):
    request_id = trip_run()

    async def scenario():
        socket = run_socket(request_id, token_headers(api), after_seq=5)
        assert (await socket.connect())[0]
        await socket.receive_json_from()
        answers = []
        for frame in (
            {"type": "reply", "interaction_id": 7, "response": "Oslo"},
            {"type": "reply", "interaction_id": 1},
            {"type": "dance"},
        ):
            await socket.send_json_to(frame)
            answers.append(await socket.receive_json_from())
        for junk in ("not json", "[1]", "[" * 100_000):
            await socket.send_to(text_data=junk)
            answers.append(await socket.receive_json_from())
        await socket.disconnect()
        return answers

    stale, invalid, unknown, *malformed = run_async(scenario)
    assert stale["type"] == "error" and stale["code"] == "INTERACTION_STALE" and stale["pending_interaction_id"] == 1
    assert invalid["code"] == "VALIDATION_ERROR" and "response" in invalid["message"]
    assert unknown["code"] == "UNKNOWN_MESSAGE_TYPE"
    assert [m["code"] for m in malformed] == ["MALFORMED_REQUEST"] * 3
    assert Run.objects.get(pk=request_id).status == "waiting_user"
