"""Upstream's two readings of a run's event log (SPEC R-UP5): FCMP envelopes and chat items.

Pure translation: no database, no HTTP. The run's one event log (runs.models.RunEvent) is the
only source; this module says what each event means in upstream's words.

* FCMP (`fcmp/1.0`), what upstream's `/events` carry: `{protocol_version, run_id, seq, ts,
  engine, type, data, meta: {attempt, local_seq}, raw_ref}` with `type` one of
  `conversation.state.changed` (`data.terminal` on the last one), `user.input.required`,
  `interaction.reply.accepted`, `interaction.auto_decide.timeout`, `assistant.reasoning`,
  `assistant.tool_call`, `assistant.command_execution`, `assistant.message.intermediate`,
  `assistant.message.final`, `assistant.message.superseded`, `diagnostic.warning`.
* Chat items (`chat-replay/1.0`), what upstream's `/chat` carry: `{protocol_version, run_id, seq,
  created_at, attempt, role, kind, text, correlation}`, each derived from one FCMP envelope (the
  messages, the replies, the process lines and the end; not the other state changes, questions or
  diagnostics, exactly as upstream).

Seq and cursors. Every event yields at most one envelope, every envelope at most one chat item,
and each keeps its event's `seq`. So both readings are subsequences of the log: their seqs rise,
with gaps where an event has nothing to say in that reading (a new run's `queued`, `result`,
`input_uploaded`; in the chat, most of them). A cursor N means the same everywhere, "I have the
log up to event N": resuming from any seq a client saw, or from a `cursor_ceiling`, misses nothing
and repeats nothing, whichever reading it was seen in. (Upstream numbers FCMP and chat with two
gapless counters of its own; its clients only compare seqs and resume from them, which gaps leave
intact.) Upstream's order holds too: the question comes before the state change to
`waiting_user`, a reply before the state change it causes, a final message before the end.

Attribution depends on what came before an event (a reply starts the next attempt), so the log
is read as a fold: a LogPosition is what the events so far have established, and `step` moves it
past one event. `meta.attempt` is the attempt an event belongs to (a reply and the state changes
it causes already belong to the attempt it starts, as upstream has it); `meta.local_seq` is the
event's place in its attempt: its seq minus the seq just before the attempt's first event, so it
starts at 1 and rises with the same gaps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from engines.protocol import interpret_final_message
from engines.replies import compact_json, is_structured, readable_reply

FCMP_VERSION = "fcmp/1.0"
CHAT_VERSION = "chat-replay/1.0"

# What every run state is called upstream: the same names.
STATES = ("queued", "running", "waiting_user", "succeeded", "failed", "canceled")
TERMINAL = frozenset({"succeeded", "failed", "canceled"})
DEFAULT_DECISION_POLICY = "engine_judgement"
USER_REPLY = "user_reply"
AUTO_DECIDE_TIMEOUT = "auto_decide_timeout"
# Run error codes of a run that a restart could not keep (R-LC13): upstream's reconcile trigger.
RESTART_FAILURES = frozenset({"ORCHESTRATOR_RESTART_INTERRUPTED", "INTERACTION_PROCESS_LOST"})
# Tool names the engines give their shell (Codex, Claude Code, Gemini): command executions upstream.
SHELL_TOOLS = frozenset({"shell", "bash", "run_shell_command", "local_shell", "exec_command"})
SUMMARY_CHARS = 160
MESSAGE_CHARS = 500
PREVIEW_CHARS = 2000

Envelope = dict[str, Any]
Item = dict[str, Any]


class LoggedEvent(Protocol):
    """A RunEvent as far as translation needs it."""

    seq: int
    kind: str
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class RunFacts:
    """What every envelope says about its run."""

    request_id: str
    engine: str


@dataclass(frozen=True)
class LogPosition:
    """What the log has established up to (and including) one event."""

    attempt: int = 1
    attempt_base: int = 0  # the seq just before `attempt`'s first event
    next_attempt: int | None = None  # announced by a repair round, in force from the next event on
    family: int = 1  # the attempt whose answer the current repair rounds are repairing
    final_attempt: int | None = None  # the last attempt that published a final message
    decision_policy: str = DEFAULT_DECISION_POLICY  # of the last question, for its auto-decision
    answered: int | None = None  # the interaction the last reply answered
    resume_cause: str | None = None  # how the last wait ended


# The payload keys `step` reads: a reader placing a cursor may fetch just these.
POSITION_KEYS = ("attempt", "attempt_number", "interaction_id", "resolution_mode", "default_decision_policy")


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def step(position: LogPosition, kind: str, payload: dict[str, Any], seq: int) -> LogPosition:
    """The position of the event `seq` (of `kind`, with `payload`), which follows `position`."""
    attempt = position.next_attempt or position.attempt
    changes: dict[str, Any] = {"next_attempt": None}
    if kind in ("activity", "activity_truncated", "assistant_message"):
        attempt = _positive(payload.get("attempt")) or attempt
    elif kind == "status":
        attempt = _positive(payload.get("attempt_number")) or attempt
    elif kind == "interaction_pending":
        policy = payload.get("default_decision_policy")
        changes["decision_policy"] = policy if isinstance(policy, str) and policy else DEFAULT_DECISION_POLICY
    elif kind == "interaction_reply":
        answered = _positive(payload.get("interaction_id"))
        attempt = answered + 1 if answered else attempt  # an interaction's id is the attempt that asked
        timed_out = payload.get("resolution_mode") == AUTO_DECIDE_TIMEOUT
        changes["answered"] = answered
        changes["resume_cause"] = "interaction_auto_decide_timeout" if timed_out else "interaction_reply"
    elif kind == "repair":
        changes["next_attempt"] = _positive(payload.get("attempt"))  # the round starts after this event
    if attempt != position.attempt:
        changes["attempt_base"] = seq - 1
        # A repair round carries on its family; any other new attempt answers anew.
        changes["family"] = position.family if position.next_attempt else attempt
    changes["attempt"] = attempt
    if kind == "assistant_message":
        changes["final_attempt"] = attempt
    return replace(position, **changes)


# ---- FCMP ------------------------------------------------------------------------------------


def _line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """`text` on one line, at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def final_message_id(attempt: int) -> str:
    return f"attempt-{attempt}-final"


def family_id(attempt: int) -> str:
    return f"attempt-{attempt}"


def _trigger(previous: str, to: str, payload: dict[str, Any], position: LogPosition) -> str:
    if previous == "waiting_user" and to in ("queued", "running"):
        timed_out = position.resume_cause == "interaction_auto_decide_timeout"
        return "interaction.auto_decide.timeout" if timed_out else "interaction.reply.accepted"
    if to == "running":
        return "turn.started"
    if to == "queued":
        return "output_repair.started"  # a resumable run queues for its repair round (R-RP1)
    if to == "waiting_user":
        return "turn.needs_input"
    if to == "succeeded":
        return "result_cache.hit" if payload.get("cache_hit") else "turn.succeeded"
    if to == "canceled":
        return "run.canceled"
    error = payload.get("error")
    if isinstance(error, dict) and error.get("code") in RESTART_FAILURES:
        return "restart.reconcile_failed"
    return "turn.failed" if previous == "running" else "run.failed"


def _terminal(to: str, error: Any) -> dict[str, Any]:
    """Upstream's `data.terminal`: a failure keeps its code; a cancel is upstream's CANCELED."""
    if to == "succeeded":
        return {"status": to, "reason_code": "SUCCEEDED"}
    if to == "canceled":
        return {"status": to, "reason_code": "CANCELED", "error": {"category": "lifecycle", "code": "CANCELED"}}
    error = error if isinstance(error, dict) else {}
    code = _text(error.get("code")) or "FAILED"
    failure = {"category": "runtime", "code": code}
    if message := _text(error.get("message")).strip():
        failure["message"] = _line(message, MESSAGE_CHARS)
    return {"status": to, "reason_code": code, "error": failure}


def _state_changed(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]] | None:
    payload = event.payload
    previous, to = payload.get("from"), payload.get("to")
    if to not in STATES:
        return None
    if previous is None:
        if to == "queued":
            return None  # upstream announces no new run: its first state change is queued → running
        previous = "queued"  # born finished (the result cache): it was never anything but new
    if previous not in STATES:
        return None
    data: dict[str, Any] = {
        "from": previous,
        "to": to,
        "trigger": _trigger(previous, to, payload, position),
        "updated_at": event.created_at.isoformat(),
        "pending_interaction_id": None,
        "pending_auth_session_id": None,
    }
    if to == "waiting_user":
        data.update(pending_interaction_id=_positive(payload.get("pending_interaction_id")), pending_owner=to)
    elif previous == "waiting_user" and to in ("queued", "running"):
        data.update(pending_interaction_id=position.answered, pending_owner=previous)
        data["resume_cause"] = position.resume_cause
    if to in TERMINAL:
        data["terminal"] = _terminal(to, payload.get("error"))
    return "conversation.state.changed", data


def _input_required(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]]:
    payload = event.payload
    data = {
        "interaction_id": _positive(payload.get("interaction_id")),
        "kind": _text(payload.get("kind")) or "open_text",
        # Never empty (R-LC4); the fallback only guards a payload written some other way.
        "prompt": _text(payload.get("prompt")).strip() or "User input is required to continue.",
    }
    return "user.input.required", data


def _clipped(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def response_preview(response: Any) -> str:
    """A reply as text: a string as it is, a structured reply in words, anything else as compact
    JSON. Only for a reply event written without its `text` (before runs.services wrote it)."""
    if isinstance(response, str):
        text = response.strip()
    elif is_structured(response):
        text = readable_reply(response)
    elif isinstance(response, dict) and isinstance(response.get("text"), str):
        text = response["text"].strip()
    else:
        text = compact_json(response)
    return _clipped(text)


def _reply(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]]:
    payload = event.payload
    data: dict[str, Any] = {
        "interaction_id": _positive(payload.get("interaction_id")),
        "accepted_at": _text(payload.get("answered_at")) or event.created_at.isoformat(),
    }
    if payload.get("resolution_mode") == AUTO_DECIDE_TIMEOUT:
        data.update(resolution_mode=AUTO_DECIDE_TIMEOUT, policy=position.decision_policy)
        return "interaction.auto_decide.timeout", data
    # The reply as the pages show it: a form's fields in its question's order, which the stored
    # reply no longer has on PostgreSQL (jsonb sorts an object's keys).
    text = payload.get("text")
    preview = _clipped(text.strip()) if isinstance(text, str) else response_preview(payload.get("response"))
    data.update(resolution_mode=USER_REPLY, response_preview=preview)
    return "interaction.reply.accepted", data


def _final_message(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]] | None:
    text = _text(event.payload.get("text"))
    if not text.strip():
        return None
    data = {
        "message_id": final_message_id(position.attempt),
        "message_family_id": family_id(position.family),
        "summary": _line(text),
        "classification": "final",
        "details": {},
        "text": text,
    }
    # A question asked with an ask_user envelope is shown as its prompt, not as the envelope's
    # JSON (upstream's display text of an asking turn's final message).
    question = interpret_final_message(text, "interactive").interaction
    if question is not None:
        data.update(display_text=question.prompt, display_format="plain_text", display_origin="pending_branch")
    return "assistant.message.final", data


def _superseded(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]] | None:
    """A repair round takes over this attempt's answer; a turn that published none has nothing to withdraw."""
    if position.final_attempt != position.attempt:
        return None
    data = {
        "message_id": final_message_id(position.attempt),
        "message_family_id": family_id(position.family),
        "reason": "output_repair_started",
        "repair_round_index": _positive(event.payload.get("round")) or 1,
        "replacement_expected": True,
    }
    return "assistant.message.superseded", data


def _process(
    type_: str, message_id: str, summary: str, details: dict[str, Any], text: str = ""
) -> tuple[str, dict[str, Any]]:
    classification = type_.removeprefix("assistant.").removeprefix("message.")
    data: dict[str, Any] = {
        "message_id": message_id,
        "summary": summary,
        "classification": classification,
        "details": details,
    }
    if text:
        data["text"] = text
    return type_, data


def _tool(payload: dict[str, Any], message_id: str) -> tuple[str, dict[str, Any]]:
    name = _text(payload.get("name")) or "tool"
    command = _text(payload.get("command"))
    details: dict[str, Any] = {"tool_name": name, "phase": _text(payload.get("phase")) or "started"}
    if _text(payload.get("id")):
        details["tool_id"] = payload["id"]
    for key in ("status", "exit_code", "duration_ms"):
        if payload.get(key) is not None:
            details[key] = payload[key]
    output = _text(payload.get("output"))
    if name.lower() in SHELL_TOOLS:
        details["command"] = command
        return _process("assistant.command_execution", message_id, _line(command or name), details, output)
    details["args"] = command
    summary = _line(f"{name}({command})" if command else name)
    return _process("assistant.tool_call", message_id, summary, details, output)


def _activity(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]] | None:
    payload = event.payload
    kind = payload.get("type")
    message_id = f"attempt-{position.attempt}-event-{event.seq}"
    if kind == "tool":
        tool_id = _text(payload.get("id"))
        # Both phases of one call are one message, as upstream has it.
        result = _tool(payload, f"attempt-{position.attempt}-tool-{tool_id}" if tool_id else message_id)
    elif kind in ("reasoning", "message"):
        text = _text(payload.get("text")).strip()
        if not text:
            return None
        type_ = "assistant.reasoning" if kind == "reasoning" else "assistant.message.intermediate"
        result = _process(type_, message_id, _line(text), {"item_type": kind}, text)
    elif kind == "file_change":
        paths = [str(path) for path in payload.get("paths") or []]
        args = ", ".join(paths)
        changed = {"tool_name": "file_change", "args": args, "paths": paths}
        result = _process("assistant.tool_call", message_id, _line(f"file_change({args})"), changed)
    elif kind == "plan":
        entries = [entry for entry in payload.get("items") or [] if isinstance(entry, dict)]
        text = "\n".join(f"[{'x' if entry.get('done') else ' '}] {_text(entry.get('text'))}" for entry in entries)
        done = sum(1 for entry in entries if entry.get("done"))
        args = f"{done}/{len(entries)} done"
        plan = {"tool_name": "plan", "args": args, "items": entries}
        result = _process("assistant.tool_call", message_id, f"plan({args})", plan, text)
    else:
        return None
    if payload.get("truncated"):
        result[1]["details"]["truncated"] = True
    return result


def _warning(code: str, message: str, severity: str = "warning") -> tuple[str, dict[str, Any]]:
    data = {"code": code, "severity": severity, "source_type": "orchestrator", "authoritative": True}
    if message:
        data["message"] = message
    return "diagnostic.warning", data


def _run_warning(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]]:
    payload = event.payload
    return _warning(_text(payload.get("code")) or "WARNING", _text(payload.get("message")))


def _activity_truncated(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]]:
    limit = _positive(event.payload.get("limit"))
    return _warning(
        "ACTIVITY_TRUNCATED",
        f"this turn's live activity stopped after {limit or 'its limit of'} events; the run's logs hold all of it",
    )


def _recovered(event: LoggedEvent, position: LogPosition) -> tuple[str, dict[str, Any]]:
    state = _text(event.payload.get("recovery_state")) or "recovered"
    return _warning(state.upper(), "the service restarted; the run kept its state", severity="info")


_TRANSLATIONS: dict[str, Callable[[LoggedEvent, LogPosition], tuple[str, dict[str, Any]] | None]] = {
    "status": _state_changed,
    "interaction_pending": _input_required,
    "interaction_reply": _reply,
    "assistant_message": _final_message,
    "repair": _superseded,
    "activity": _activity,
    "activity_truncated": _activity_truncated,
    "warning": _run_warning,
    "recovered": _recovered,
    # `result` (its summary is the last state change's `terminal`) and `input_uploaded` say
    # nothing upstream's clients read.
}


def envelope(event: LoggedEvent, position: LogPosition, facts: RunFacts) -> Envelope | None:
    """The FCMP envelope of `event`, whose position is `position`; None when it has none."""
    translate = _TRANSLATIONS.get(event.kind)
    translated = translate(event, position) if translate else None
    if translated is None:
        return None
    type_, data = translated
    return {
        "protocol_version": FCMP_VERSION,
        "run_id": facts.request_id,
        "seq": event.seq,
        "ts": event.created_at.isoformat(),
        "engine": facts.engine,
        "type": type_,
        "data": data,
        "meta": {"attempt": position.attempt, "local_seq": event.seq - position.attempt_base},
        "raw_ref": None,
    }


def fcmp_events(
    events: Iterable[LoggedEvent], position: LogPosition, facts: RunFacts
) -> tuple[list[Envelope], LogPosition]:
    """The envelopes of `events`, which follow `position`, and the position after them."""
    envelopes = []
    for event in events:
        position = step(position, event.kind, event.payload, event.seq)
        if (translated := envelope(event, position, facts)) is not None:
            envelopes.append(translated)
    return envelopes, position


# ---- chat ------------------------------------------------------------------------------------


def terminal_notice(data: dict[str, Any]) -> str:
    terminal = data.get("terminal") or {}
    status = terminal.get("status")
    if status == "succeeded":
        return "The run succeeded."
    if status == "canceled":
        return "The run was canceled."
    error = terminal.get("error") or {}
    if error.get("message"):
        return f"The run failed: {error['message']}"
    return f"The run failed ({error['code']})." if error.get("code") else "The run failed."


def _pick(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: data.get(key) for key in keys}


def _chat_row(fcmp: Envelope) -> tuple[str, str, str, dict[str, Any]] | None:
    """(role, kind, text, correlation) of the chat item an envelope yields, or None."""
    type_, data = fcmp["type"], fcmp["data"]
    if type_ == "interaction.reply.accepted":
        text = data.get("response_preview") or "Reply submitted"
        return (
            "user",
            "interaction_reply",
            text,
            {"interaction_id": data["interaction_id"], "accepted_at": data["accepted_at"]},
        )
    if type_ == "interaction.auto_decide.timeout":
        text = f"No reply came in time: the agent went on by its own judgement ({data['policy']})."
        return "system", "orchestration_notice", text, {"interaction_id": data["interaction_id"]}
    if type_ == "assistant.message.final":
        ids = _pick(data, ("message_id", "message_family_id", "replaces_message_id"))
        return "assistant", "assistant_final", data.get("display_text") or data["text"], ids
    if type_ == "assistant.message.superseded":
        keys = ("message_id", "message_family_id", "reason", "repair_round_index", "replacement_expected")
        return "assistant", "assistant_revision", "", _pick(data, keys)
    if type_ == "assistant.message.intermediate":
        return "assistant", "assistant_message", data["text"], _pick(data, ("message_id", "summary", "classification"))
    if type_ in ("assistant.reasoning", "assistant.tool_call", "assistant.command_execution"):
        if data["details"].get("phase") == "started":
            return None  # a call shows once in the chat, when it has finished (its start is in FCMP)
        process = type_.removeprefix("assistant.")
        picked = _pick(data, ("message_id", "summary", "details", "classification"))
        return "assistant", "assistant_process", data["summary"], {"process_type": process, **picked}
    if type_ == "conversation.state.changed" and data["to"] in TERMINAL:
        return "system", "orchestration_notice", terminal_notice(data), {"status": data["to"]}
    return None


def chat_item(fcmp: Envelope) -> Item | None:
    """The chat-replay item derived from one FCMP envelope, as upstream derives it; None when the
    envelope is no line of the conversation (questions, other state changes, diagnostics)."""
    row = _chat_row(fcmp)
    if row is None:
        return None
    role, kind, text, correlation = row
    return {
        "protocol_version": CHAT_VERSION,
        "run_id": fcmp["run_id"],
        "seq": fcmp["seq"],
        "created_at": fcmp["ts"],
        "attempt": fcmp["meta"]["attempt"],
        "role": role,
        "kind": kind,
        "text": text,
        "correlation": {**correlation, "fcmp_seq": fcmp["seq"]},
    }


def chat_items(events: Iterable[LoggedEvent], position: LogPosition, facts: RunFacts) -> tuple[list[Item], LogPosition]:
    """The chat items of `events`, which follow `position`, and the position after them."""
    envelopes, position = fcmp_events(events, position, facts)
    return [item for fcmp in envelopes if (item := chat_item(fcmp)) is not None], position


# One reading of the log: FCMP or chat.
Reading = Callable[[Iterable[LoggedEvent], LogPosition, RunFacts], tuple[list[dict[str, Any]], LogPosition]]
