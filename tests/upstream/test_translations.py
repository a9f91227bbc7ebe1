"""The run's event log read as upstream's FCMP envelopes and chat items (SPEC R-UP5), event by
event, against upstream v0.7.9's documented shapes and sequences (docs/runtime_stream_protocol.md,
docs/session_event_flow_sequence_fcmp.md and its schema's FCMP and chat-replay definitions).

Pure: the logs here are written the way runs.services writes them (payloads as lifecycle,
claims, interactions and activity build them); tests/upstream/test_streams.py reads real ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engines.replies import question_fields, readable_reply
from upstream.fcmp import (
    POSITION_KEYS,
    LogPosition,
    RunFacts,
    chat_item,
    chat_items,
    fcmp_events,
    response_preview,
    step,
)

FACTS = RunFacts(request_id="0b6f0d6e-8f8a-4bb4-9a59-2b8f4c1f2a11", engine="codex")
START = datetime(2026, 2, 24, 12, 34, 56, tzinfo=UTC)
ENVELOPE_KEYS = {"protocol_version", "run_id", "seq", "ts", "engine", "type", "data", "meta", "raw_ref"}
CHAT_KEYS = {"protocol_version", "run_id", "seq", "created_at", "attempt", "role", "kind", "text", "correlation"}
# What upstream's schema allows in each data object (additionalProperties: false).
STATE_KEYS = {
    "from",
    "to",
    "trigger",
    "updated_at",
    "pending_interaction_id",
    "pending_auth_session_id",
    "resume_cause",
    "pending_owner",
    "resume_ticket_id",
    "ticket_consumed",
    "terminal",
}
PROCESS_KEYS = {
    "message_id",
    "summary",
    "classification",
    "details",
    "text",
    "replaces_message_id",
    "message_family_id",
}
STATES = {"queued", "running", "waiting_user", "waiting_auth", "succeeded", "failed", "canceled"}


@dataclass
class Event:
    seq: int
    kind: str
    payload: dict[str, Any]
    created_at: datetime


def log(*entries: tuple[str, dict[str, Any]]) -> list[Event]:
    return [Event(seq, kind, payload, START + timedelta(seconds=seq)) for seq, (kind, payload) in enumerate(entries, 1)]


def status(previous: str | None, to: str, error: dict[str, str] | None = None, **extra: Any) -> tuple[str, dict]:
    """As runs.services.lifecycle.status_event writes it."""
    return "status", {"from": previous, "to": to, "error": error, **extra}


def activity(attempt: int, **item: Any) -> tuple[str, dict]:
    return "activity", {"attempt": attempt, **item}


def said(attempt: int, text: str) -> tuple[str, dict]:
    return "assistant_message", {"attempt": attempt, "text": text}


def result(state: str, error: dict[str, str] | None = None) -> tuple[str, dict]:
    data = {"haiku": ["a", "b", "c"]} if state == "succeeded" else None
    envelope = {"status": "success", "data": data, "artifacts": [], "repair_level": "none"}
    return "result", {**envelope, "validation_warnings": [], "error": error}


def pending(attempt: int, prompt: str = "Where to?", **extra: Any) -> tuple[str, dict]:
    payload = {
        "interaction_id": attempt,
        "kind": "open_text",
        "prompt": prompt,
        "options": [],
        "ui_hints": {},
        "default_decision_policy": "engine_judgement",
        "required_fields": [],
        "context": {"source": "assistant_message"},
    }
    return "interaction_pending", {**payload, **extra}


def reply(
    interaction_id: int, response: Any, mode: str = "user_reply", field_order: Sequence[str] = ()
) -> tuple[str, dict]:
    """As runs.services.interactions writes it: `text` is the reply as the pages show it."""
    answered_at = (START + timedelta(minutes=5)).isoformat()
    return "interaction_reply", {
        "interaction_id": interaction_id,
        "response": response,
        "text": readable_reply(response, field_order),
        "resolution_mode": mode,
        "answered_at": answered_at,
    }


def repair(round_: int, attempt: int) -> tuple[str, dict]:
    error = {"code": "OUTPUT_SCHEMA_INVALID", "message": "output does not match the skill's output schema"}
    problems = [{"pointer": "/haiku", "expected": "a value of type array", "got": '"one line"'}]
    return "repair", {"round": round_, "max_rounds": 2, "attempt": attempt, "error": error, "problems": problems}


def fcmp(events: list[Event]) -> list[dict[str, Any]]:
    envelopes, _ = fcmp_events(events, LogPosition(), FACTS)
    return envelopes


def chat(events: list[Event]) -> list[dict[str, Any]]:
    items, _ = chat_items(events, LogPosition(), FACTS)
    return items


def summary(envelopes: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    """(seq, type, attempt) per envelope: the wire sequences upstream's docs list."""
    return [(e["seq"], e["type"], e["meta"]["attempt"]) for e in envelopes]


def state(envelope: dict[str, Any]) -> tuple[str, str, str]:
    assert envelope["type"] == "conversation.state.changed"
    return envelope["data"]["from"], envelope["data"]["to"], envelope["data"]["trigger"]


AUTO_SUCCESS = log(
    status(None, "queued"),
    status("queued", "running", attempt_number=1),
    activity(1, type="reasoning", text="Counting syllables first."),
    activity(1, type="tool", id="item_0", phase="started", name="shell", command="wc -w notes.txt"),
    activity(
        1,
        type="tool",
        id="item_0",
        phase="finished",
        name="shell",
        command="wc -w notes.txt",
        status="ok",
        exit_code=0,
        duration_ms=12,
        output="42 notes.txt\n",
    ),
    activity(1, type="message", text="Writing the haiku now."),
    said(1, '{"haiku": ["a", "b", "c"]}'),
    result("succeeded"),
    status("running", "succeeded"),
)


# ---- the envelope ----------------------------------------------------------------------------


def test_every_envelope_has_upstreams_keys_and_the_seq_of_its_event():
    envelopes = fcmp(AUTO_SUCCESS)
    assert envelopes
    for envelope in envelopes:
        assert set(envelope) == ENVELOPE_KEYS
        assert envelope["protocol_version"] == "fcmp/1.0"
        assert envelope["run_id"] == FACTS.request_id and envelope["engine"] == "codex"
        event = AUTO_SUCCESS[envelope["seq"] - 1]
        assert envelope["ts"] == event.created_at.isoformat()
        assert set(envelope["meta"]) == {"attempt", "local_seq"}
        assert envelope["raw_ref"] is None
    seqs = [e["seq"] for e in envelopes]
    assert seqs == sorted(set(seqs))  # one envelope per event at most, in the log's order


def test_an_auto_run_reads_as_upstreams_auto_success_sequence():
    """docs: queued→running, process events, the final message, then running→succeeded with
    data.terminal; no event announces the new run, none comes of the result envelope."""
    assert summary(fcmp(AUTO_SUCCESS)) == [
        (2, "conversation.state.changed", 1),
        (3, "assistant.reasoning", 1),
        (4, "assistant.command_execution", 1),
        (5, "assistant.command_execution", 1),
        (6, "assistant.message.intermediate", 1),
        (7, "assistant.message.final", 1),
        (9, "conversation.state.changed", 1),
    ]
    envelopes = fcmp(AUTO_SUCCESS)
    assert state(envelopes[0]) == ("queued", "running", "turn.started")
    assert envelopes[0]["data"]["updated_at"] == AUTO_SUCCESS[1].created_at.isoformat()
    assert state(envelopes[-1]) == ("running", "succeeded", "turn.succeeded")
    assert envelopes[-1]["data"]["terminal"] == {"status": "succeeded", "reason_code": "SUCCEEDED"}
    assert [e["meta"]["local_seq"] for e in envelopes] == [2, 3, 4, 5, 6, 7, 9]


def test_state_changes_carry_only_the_keys_upstream_allows():
    for envelope in fcmp(AUTO_SUCCESS + FAILED_LOG[1:]):
        if envelope["type"] == "conversation.state.changed":
            data = envelope["data"]
            assert set(data) <= STATE_KEYS
            assert {"from", "to", "trigger", "updated_at", "pending_interaction_id", "pending_auth_session_id"} <= set(
                data
            )
            assert data["from"] in STATES and data["to"] in STATES and data["trigger"]


def test_process_events_follow_upstreams_shapes():
    reasoning, started, finished, intermediate, final = fcmp(AUTO_SUCCESS)[1:6]
    for envelope in (reasoning, started, finished, intermediate):
        assert set(envelope["data"]) <= PROCESS_KEYS
        assert {"message_id", "summary", "classification", "details"} <= set(envelope["data"])
        assert envelope["data"]["summary"]
    assert reasoning["data"]["classification"] == "reasoning"
    assert reasoning["data"]["text"] == "Counting syllables first."
    assert finished["data"]["classification"] == "command_execution"
    assert finished["data"]["summary"] == "wc -w notes.txt"
    assert finished["data"]["details"]["command"] == "wc -w notes.txt"
    assert finished["data"]["details"]["exit_code"] == 0 and finished["data"]["text"] == "42 notes.txt\n"
    assert started["data"]["message_id"] == finished["data"]["message_id"]  # one call, one message
    assert (started["data"]["details"]["phase"], finished["data"]["details"]["phase"]) == ("started", "finished")
    assert intermediate["data"]["classification"] == "intermediate"
    assert final["data"]["text"] == '{"haiku": ["a", "b", "c"]}'
    assert final["data"]["classification"] == "final"
    assert {"message_id", "text"} <= set(final["data"]) <= PROCESS_KEYS
    ids = [e["data"]["message_id"] for e in (reasoning, finished, intermediate, final)]
    assert len(set(ids)) == 4


def test_a_tool_that_is_no_shell_is_a_tool_call_named_with_its_arguments():
    events = log(
        status("queued", "running", attempt_number=1),
        activity(1, type="tool", id="t1", phase="finished", name="Read", command="notes.txt", status="ok"),
        activity(1, type="file_change", paths=["artifacts/haiku.md", "notes.md"]),
        activity(1, type="plan", items=[{"text": "read", "done": True}, {"text": "write", "done": False}]),
        activity(1, type="reasoning", text="x" * 500, truncated=True),
    )
    tool, changed, plan, reasoning = fcmp(events)[1:]
    assert (tool["type"], tool["data"]["summary"]) == ("assistant.tool_call", "Read(notes.txt)")
    assert tool["data"]["details"]["tool_name"] == "Read" and tool["data"]["details"]["args"] == "notes.txt"
    assert changed["type"] == "assistant.tool_call"
    assert changed["data"]["details"]["paths"] == ["artifacts/haiku.md", "notes.md"]
    assert changed["data"]["summary"] == "file_change(artifacts/haiku.md, notes.md)"
    assert plan["type"] == "assistant.tool_call" and plan["data"]["summary"] == "plan(1/2 done)"
    assert plan["data"]["text"] == "[x] read\n[ ] write"
    assert len(reasoning["data"]["summary"]) <= 160 and reasoning["data"]["details"]["truncated"] is True


def test_events_upstream_has_no_word_for_yield_nothing():
    events = log(
        status(None, "queued"),
        ("input_uploaded", {"files": ["notes.txt"]}),
        result("succeeded"),
        activity(1, type="reasoning", text="   "),
        activity(1, type="something_new"),
        said(1, "  "),
        ("kind_of_tomorrow", {"x": 1}),
    )
    assert fcmp(events) == []
    assert chat(events) == []


def test_warnings_are_diagnostics():
    events = log(
        ("warning", {"code": "OUTPUT_REPAIRED_GENERIC", "message": "the result JSON was recovered"}),
        ("activity_truncated", {"attempt": 1, "limit": 500}),
        ("recovered", {"recovery_state": "recovered_waiting"}),
    )
    warning, truncated, recovered = fcmp(events)
    assert {e["type"] for e in (warning, truncated, recovered)} == {"diagnostic.warning"}
    assert warning["data"]["code"] == "OUTPUT_REPAIRED_GENERIC"
    assert warning["data"]["message"] == "the result JSON was recovered"
    assert warning["data"]["severity"] == "warning"
    assert truncated["data"]["code"] == "ACTIVITY_TRUNCATED" and "500" in truncated["data"]["message"]
    assert (recovered["data"]["code"], recovered["data"]["severity"]) == ("RECOVERED_WAITING", "info")
    assert chat(events) == []  # diagnostics are no line of the conversation


# ---- terminal data ---------------------------------------------------------------------------

FAILED_LOG = log(
    status(None, "queued"),
    status("queued", "running", attempt_number=1),
    result("failed", {"code": "OUTPUT_SCHEMA_INVALID", "message": "output does not match: /haiku"}),
    status("running", "failed", {"code": "OUTPUT_SCHEMA_INVALID", "message": "output does not match: /haiku"}),
)


def test_a_failure_carries_its_code_and_message():
    """docs: terminal {status, reason_code, error {category: runtime, code, message}}."""
    last = fcmp(FAILED_LOG)[-1]
    assert state(last) == ("running", "failed", "turn.failed")
    assert last["data"]["terminal"] == {
        "status": "failed",
        "reason_code": "OUTPUT_SCHEMA_INVALID",
        "error": {"category": "runtime", "code": "OUTPUT_SCHEMA_INVALID", "message": "output does not match: /haiku"},
    }


def test_a_failure_message_is_a_bounded_summary_and_a_missing_code_is_failed():
    events = log(status("running", "failed", {"code": "ENGINE_FAILED", "message": "boom\n" * 1000}))
    error = fcmp(events)[0]["data"]["terminal"]["error"]
    assert len(error["message"]) <= 500 and "\n" not in error["message"]
    bare = fcmp(log(status("running", "failed", None)))[0]["data"]["terminal"]
    assert bare == {"status": "failed", "reason_code": "FAILED", "error": {"category": "runtime", "code": "FAILED"}}


def test_a_cancel_is_upstreams_lifecycle_cancel_from_any_state():
    for previous in ("queued", "running", "waiting_user"):
        error = {"code": "CANCELED_BY_USER", "message": "the run was canceled"}
        [envelope] = fcmp(log(status(previous, "canceled", error)))
        assert state(envelope) == (previous, "canceled", "run.canceled")
        assert envelope["data"]["terminal"] == {
            "status": "canceled",
            "reason_code": "CANCELED",
            "error": {"category": "lifecycle", "code": "CANCELED"},
        }


def test_failures_outside_a_turn_name_their_cause():
    restarted = {"code": "ORCHESTRATOR_RESTART_INTERRUPTED", "message": "the worker died"}
    assert state(fcmp(log(status("running", "failed", restarted)))[0])[2] == "restart.reconcile_failed"
    timed_out = {"code": "INTERACTION_WAIT_TIMEOUT", "message": "no reply"}
    assert state(fcmp(log(status("waiting_user", "failed", timed_out)))[0])[2] == "run.failed"


def test_a_run_born_finished_from_the_result_cache_ends_once():
    events = log(result("succeeded"), status(None, "succeeded", cache_hit=True, cached_from="x"))
    [envelope] = fcmp(events)
    assert state(envelope) == ("queued", "succeeded", "result_cache.hit")
    assert envelope["data"]["terminal"]["status"] == "succeeded"


# ---- interactive runs ------------------------------------------------------------------------

ASK_AND_REPLY = log(
    status(None, "queued"),
    status("queued", "running", attempt_number=1),
    said(1, "Where would you like to go?"),
    pending(1, "Where would you like to go?"),
    status("running", "waiting_user", pending_interaction_id=1),
    reply(1, "Kyoto, two days"),
    status("waiting_user", "queued"),
    status("queued", "running", attempt_number=2),
    activity(2, type="reasoning", text="Planning Kyoto."),
    said(2, '{"destination": "Kyoto", "__SKILL_DONE__": true}'),
    result("succeeded"),
    status("running", "succeeded"),
)


def test_ask_and_reply_read_as_upstreams_interactive_sequence():
    """The question comes before the state change to waiting_user (upstream's code order); the
    reply, and the state changes it causes, belong to the attempt it starts."""
    assert summary(fcmp(ASK_AND_REPLY)) == [
        (2, "conversation.state.changed", 1),
        (3, "assistant.message.final", 1),
        (4, "user.input.required", 1),
        (5, "conversation.state.changed", 1),
        (6, "interaction.reply.accepted", 2),
        (7, "conversation.state.changed", 2),
        (8, "conversation.state.changed", 2),
        (9, "assistant.reasoning", 2),
        (10, "assistant.message.final", 2),
        (12, "conversation.state.changed", 2),
    ]
    envelopes = {e["seq"]: e for e in fcmp(ASK_AND_REPLY)}
    assert envelopes[6]["meta"]["local_seq"] == 1  # the first event of attempt 2
    assert [envelopes[seq]["meta"]["local_seq"] for seq in (7, 8, 10)] == [2, 3, 5]


def test_the_question_and_the_wait():
    envelopes = {e["seq"]: e for e in fcmp(ASK_AND_REPLY)}
    assert envelopes[4]["data"] == {"interaction_id": 1, "kind": "open_text", "prompt": "Where would you like to go?"}
    assert state(envelopes[5]) == ("running", "waiting_user", "turn.needs_input")
    assert envelopes[5]["data"]["pending_interaction_id"] == 1
    assert envelopes[5]["data"]["pending_owner"] == "waiting_user"
    assert "terminal" not in envelopes[5]["data"]


def test_the_reply_and_the_resumption():
    envelopes = {e["seq"]: e for e in fcmp(ASK_AND_REPLY)}
    assert envelopes[6]["data"] == {
        "interaction_id": 1,
        "resolution_mode": "user_reply",
        "accepted_at": (START + timedelta(minutes=5)).isoformat(),
        "response_preview": "Kyoto, two days",
    }
    assert state(envelopes[7]) == ("waiting_user", "queued", "interaction.reply.accepted")
    assert envelopes[7]["data"]["resume_cause"] == "interaction_reply"
    assert envelopes[7]["data"]["pending_interaction_id"] == 1
    assert state(envelopes[8]) == ("queued", "running", "turn.started")


def test_a_sticky_process_resumes_straight_from_the_wait():
    events = log(
        status("queued", "running", attempt_number=1),
        said(1, "Which city?"),
        pending(1, "Which city?"),
        status("running", "waiting_user", pending_interaction_id=1),
        reply(1, "Oslo"),
        status("waiting_user", "running"),
        said(2, "Done."),
    )
    resumed = fcmp(events)[-2]
    assert state(resumed) == ("waiting_user", "running", "interaction.reply.accepted")
    assert resumed["meta"]["attempt"] == 2 and fcmp(events)[-1]["meta"]["attempt"] == 2


def test_a_question_asked_by_envelope_shows_as_its_prompt():
    """upstream: an asking turn's final message is displayed as the question, not its JSON."""
    envelope = (
        '{"ask_user": {"interaction_id": 1, "kind": "choose_one", "prompt": "Kyoto or Lisbon?", "options": ["Kyoto"]}}'
    )
    events = log(
        status("queued", "running", attempt_number=1),
        said(1, "Two good choices.\n\n" + envelope),
        said(1, "Where to?"),
        said(1, '{"destination": "Kyoto", "__SKILL_DONE__": true}'),
    )
    asked, plain, answered = fcmp(events)[1:]
    assert asked["data"]["text"] == "Two good choices.\n\n" + envelope  # the message as the agent wrote it
    assert asked["data"]["display_text"] == "Kyoto or Lisbon?"
    assert (asked["data"]["display_format"], asked["data"]["display_origin"]) == ("plain_text", "pending_branch")
    assert "display_text" not in plain["data"] and "display_text" not in answered["data"]
    assert [i["text"] for i in chat(events)] == ["Kyoto or Lisbon?", "Where to?", answered["data"]["text"]]


def test_an_unanswered_question_decided_on_timeout():
    """docs: interaction.auto_decide.timeout {interaction_id, resolution_mode, accepted_at,
    policy}, then the state change with resume cause interaction_auto_decide_timeout."""
    events = log(
        status("queued", "running", attempt_number=1),
        pending(1, default_decision_policy="cautious"),
        status("running", "waiting_user", pending_interaction_id=1),
        reply(1, "No reply arrived in time. Continue on your own judgement.", mode="auto_decide_timeout"),
        status("waiting_user", "queued"),
    )
    decided, resumed = fcmp(events)[-2:]
    assert decided["type"] == "interaction.auto_decide.timeout"
    assert decided["data"] == {
        "interaction_id": 1,
        "resolution_mode": "auto_decide_timeout",
        "accepted_at": (START + timedelta(minutes=5)).isoformat(),
        "policy": "cautious",
    }
    assert decided["meta"]["attempt"] == 2
    assert state(resumed) == ("waiting_user", "queued", "interaction.auto_decide.timeout")
    assert resumed["data"]["resume_cause"] == "interaction_auto_decide_timeout"


def test_replies_preview_as_text():
    assert response_preview("  Oslo  ") == "Oslo"
    assert response_preview({"text": "Oslo", "extra": 1}) == "Oslo"
    assert response_preview({"city": "Oslo", "days": 2}) == '{"city":"Oslo","days":2}'
    assert response_preview(3) == "3"
    assert response_preview({"confirmed": True}) == "Yes"  # a structured reply in words, as the agent read it
    assert response_preview({"fields": {"city": "Oslo", "days": 2}}) == "city: Oslo\ndays: 2"
    assert len(response_preview("x" * 10_000)) == 2000


def test_a_form_reply_previews_in_its_questions_field_order():
    """The reply event's `text` (as the pages show it) is the preview: the stored reply comes back
    with its keys sorted on PostgreSQL, the form's own order is title before year."""
    fields = [
        {"name": "title", "label": "Title", "type": "text", "required": True},
        {"name": "year", "label": "Year", "type": "integer", "required": False},
    ]
    asked = pending(1, "Details?", kind="fill_fields", ui_hints={"fields": fields})
    stored = {"fields": {"year": 2024, "title": "Tides"}}
    answered = reply(1, stored, field_order=question_fields(asked[1]))
    events = log(
        status("queued", "running", attempt_number=1),
        asked,
        status("running", "waiting_user", pending_interaction_id=1),
        answered,
        status("waiting_user", "queued"),
    )
    accepted = fcmp(events)[-2]
    assert accepted["data"]["response_preview"] == "title: Tides\nyear: 2024"
    assert chat(events)[-1]["text"] == "title: Tides\nyear: 2024"
    # An event written before the reply event carried its text: the reply itself, in its own order.
    older = log(("interaction_reply", {key: value for key, value in answered[1].items() if key != "text"}))
    assert fcmp(older)[0]["data"]["response_preview"] == "year: 2024\ntitle: Tides"


# ---- attempts and repair rounds --------------------------------------------------------------

RESUMABLE_REPAIR = log(
    status(None, "queued"),
    status("queued", "running", attempt_number=1),
    said(1, '{"haiku": "one line"}'),
    repair(1, 2),
    status("running", "queued", attempt_number=2, repair_round=1),
    status("queued", "running", attempt_number=2, repair_round=1),
    said(2, '{"haiku": ["a", "b", "c"]}'),
    ("warning", {"code": "OUTPUT_SCHEMA_REPAIR_CONVERGED", "message": "repaired in round 1"}),
    result("succeeded"),
    status("running", "succeeded"),
)


def test_a_repair_round_supersedes_the_answer_it_repairs():
    """docs: repair takes over a published final with assistant.message.superseded; the round's
    own final answer joins the same message family."""
    envelopes = {e["seq"]: e for e in fcmp(RESUMABLE_REPAIR)}
    superseded = envelopes[4]
    assert superseded["type"] == "assistant.message.superseded"
    assert superseded["meta"]["attempt"] == 1
    assert superseded["data"] == {
        "message_id": envelopes[3]["data"]["message_id"],
        "message_family_id": envelopes[3]["data"]["message_family_id"],
        "reason": "output_repair_started",
        "repair_round_index": 1,
        "replacement_expected": True,
    }
    assert state(envelopes[5]) == ("running", "queued", "output_repair.started")
    assert [envelopes[seq]["meta"]["attempt"] for seq in (5, 6, 7, 8, 10)] == [2, 2, 2, 2, 2]
    assert envelopes[5]["meta"]["local_seq"] == 1
    assert envelopes[7]["data"]["message_family_id"] == envelopes[3]["data"]["message_family_id"]
    assert envelopes[7]["data"]["message_id"] != envelopes[3]["data"]["message_id"]
    assert envelopes[8]["type"] == "diagnostic.warning"


def test_a_sticky_repair_round_begins_right_after_its_announcement():
    """A sticky process gets the repair prompt without a state change: whatever follows the repair
    event is the new attempt's, even a turn that ends without a word."""
    events = log(
        status("queued", "running", attempt_number=1),
        said(1, '{"haiku": "one line"}'),
        repair(1, 2),
        ("warning", {"code": "OUTPUT_SCHEMA_REPAIR_EXHAUSTED", "message": "no rounds left"}),
        status("running", "failed", {"code": "OUTPUT_SCHEMA_INVALID", "message": "still wrong"}),
    )
    attempts = [(e["seq"], e["meta"]["attempt"]) for e in fcmp(events)]
    assert attempts == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]


def test_a_repair_of_a_turn_that_said_nothing_supersedes_nothing():
    events = log(status("queued", "running", attempt_number=1), repair(1, 2))
    assert [e["type"] for e in fcmp(events)] == ["conversation.state.changed"]


def test_a_new_question_starts_a_new_message_family():
    families = [e["data"]["message_family_id"] for e in fcmp(ASK_AND_REPLY) if e["type"] == "assistant.message.final"]
    assert len(set(families)) == 2


@pytest.mark.parametrize("history", [AUTO_SUCCESS, ASK_AND_REPLY, RESUMABLE_REPAIR, FAILED_LOG])
def test_a_cursor_anywhere_resumes_the_same_reading(history):
    """What a stream resumed at any cursor sends is exactly the rest of the whole reading, with
    the position there folded from POSITION_KEYS alone (what upstream.streams reads)."""
    whole = fcmp(history)
    whole_chat = chat(history)
    for cut in range(len(history) + 1):
        position = LogPosition()
        for event in history[:cut]:
            keys = {key: event.payload[key] for key in POSITION_KEYS if key in event.payload}
            position = step(position, event.kind, keys, event.seq)
        rest, _ = fcmp_events(history[cut:], position, FACTS)
        assert rest == [e for e in whole if e["seq"] > cut], cut
        rest_chat, _ = chat_items(history[cut:], position, FACTS)
        assert rest_chat == [i for i in whole_chat if i["seq"] > cut], cut


def test_step_ignores_payload_values_of_the_wrong_type():
    position = step(LogPosition(), "status", {"attempt_number": True}, 1)
    position = step(position, "activity", {"attempt": "2"}, 2)
    position = step(position, "interaction_reply", {"interaction_id": -1}, 3)
    assert position.attempt == 1
    assert replace(position, resume_cause=None) == LogPosition()


# ---- chat ------------------------------------------------------------------------------------


def test_chat_items_have_upstreams_keys_and_their_envelopes_seq():
    for item in chat(ASK_AND_REPLY):
        assert set(item) == CHAT_KEYS
        assert item["protocol_version"] == "chat-replay/1.0"
        assert item["correlation"]["fcmp_seq"] == item["seq"]
        assert item["created_at"] == ASK_AND_REPLY[item["seq"] - 1].created_at.isoformat()


def test_the_chat_of_an_interactive_run():
    """Upstream's derivation: finals are the assistant's lines (the question too), the reply is
    the user's, process steps are folded process lines, and the end is a system notice; the
    question event itself and the other state changes are no line."""
    rows = [(i["seq"], i["attempt"], i["role"], i["kind"], i["text"]) for i in chat(ASK_AND_REPLY)]
    assert rows == [
        (3, 1, "assistant", "assistant_final", "Where would you like to go?"),
        (6, 2, "user", "interaction_reply", "Kyoto, two days"),
        (9, 2, "assistant", "assistant_process", "Planning Kyoto."),
        (10, 2, "assistant", "assistant_final", '{"destination": "Kyoto", "__SKILL_DONE__": true}'),
        (12, 2, "system", "orchestration_notice", "The run succeeded."),
    ]
    reply_item = chat(ASK_AND_REPLY)[1]
    assert reply_item["correlation"] == {
        "interaction_id": 1,
        "accepted_at": (START + timedelta(minutes=5)).isoformat(),
        "fcmp_seq": 6,
    }


def test_the_chat_shows_a_tool_call_once_it_has_finished():
    rows = [(i["seq"], i["kind"], i["text"]) for i in chat(AUTO_SUCCESS)]
    assert rows == [
        (3, "assistant_process", "Counting syllables first."),
        (5, "assistant_process", "wc -w notes.txt"),
        (6, "assistant_message", "Writing the haiku now."),
        (7, "assistant_final", '{"haiku": ["a", "b", "c"]}'),
        (9, "orchestration_notice", "The run succeeded."),
    ]
    process = chat(AUTO_SUCCESS)[1]["correlation"]
    assert process["process_type"] == "command_execution" and process["details"]["exit_code"] == 0


def test_the_chat_notices_how_a_run_ended():
    failed = chat(FAILED_LOG)[-1]
    assert (failed["role"], failed["kind"]) == ("system", "orchestration_notice")
    assert failed["text"] == "The run failed: output does not match: /haiku"
    assert failed["correlation"] == {"status": "failed", "fcmp_seq": 4}
    canceled = chat(log(status("waiting_user", "canceled", {"code": "CANCELED_BY_USER", "message": "x"})))
    assert canceled[0]["text"] == "The run was canceled."
    bare = chat(log(status("running", "failed", None)))
    assert bare[0]["text"] == "The run failed (FAILED)."


def test_the_chat_folds_a_superseded_answer_and_notes_an_auto_decision():
    items = chat(RESUMABLE_REPAIR)
    revision = next(i for i in items if i["kind"] == "assistant_revision")
    assert (revision["role"], revision["text"], revision["attempt"]) == ("assistant", "", 1)
    assert revision["correlation"]["message_id"] == items[0]["correlation"]["message_id"]
    decided = log(
        pending(1, default_decision_policy="cautious"),
        reply(1, "No reply arrived in time.", mode="auto_decide_timeout"),
    )
    [notice] = chat(decided)
    assert (notice["role"], notice["kind"]) == ("system", "orchestration_notice")
    assert "cautious" in notice["text"] and notice["correlation"]["interaction_id"] == 1


def test_a_chat_item_is_none_for_envelopes_that_are_no_line():
    envelopes = {e["type"]: e for e in fcmp(ASK_AND_REPLY)}
    assert chat_item(envelopes["user.input.required"]) is None
    non_terminal = [e for e in fcmp(ASK_AND_REPLY) if e["type"] == "conversation.state.changed"][:-1]
    assert [chat_item(e) for e in non_terminal] == [None] * len(non_terminal)
