"""Engine-neutral reading of the agent's final message (R-TP2, R-TP3, R-TP4).

Adapters hand this layer only the agent's own final message: tool and command output never gets
here, so a done marker or an envelope echoed by a shell command is never evidence.

Outcome rules of ``interpret_final_message`` (the engine did not fail; engine failures are
decided by the adapter before this layer is reached):

* interactive mode
  - done marker found, or JSON data without any ask_user envelope → ``final``
  - a valid ask_user envelope → ``ask_user`` with ``interaction`` set
  - an invalid envelope → ``ask_user`` with ``interaction=None`` and ``ask_user_invalid=True``
    (R-TP5: the envelope is discarded, the backend builds the pending itself)
  - no usable JSON at all → ``ask_user`` with ``interaction=None``: a plain-text message is a
    question (R-LC2), the backend builds the pending from ``assistant_text`` (R-LC4)
* auto mode: always ``final``; ``final_data`` is None when the message holds no JSON data, and the
  schema check fails the run. Envelopes are never data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .types import DONE_MARKER, ExecutionMode, Interaction, Outcome, RepairLevel, json_object

WARNING_REPAIRED = "OUTPUT_REPAIRED_GENERIC"
WARNING_ASK_USER_INVALID = "ASK_USER_PAYLOAD_INVALID"
WARNING_HINTS_INVALID = "ASK_USER_HINTS_INVALID"

KINDS = ("open_text", "choose_one", "confirm", "fill_fields", "upload_files", "risk_ack")
KIND_ALIASES = {
    "decision": "choose_one",
    "single_select": "choose_one",
    "confirmation": "confirm",
    "clarification": "open_text",
}
DEFAULT_DECISION_POLICY = "engine_judgement"
FIELD_TYPES = ("text", "textarea", "number", "integer", "boolean", "date", "email")
# The most fields (fill_fields) or file slots (upload_files) one question may ask for.
MAX_ITEMS = 20
MAX_NAME_CHARS = 64

_FENCE_JSON = re.compile(r"```[ \t]*json[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_FENCE_ANY = re.compile(r"```[^\n`]*\r?\n(.*?)```", re.DOTALL)
_MARKER_LINE = re.compile(r'^[ \t]*\{\s*"' + DONE_MARKER + r'"\s*:\s*true\s*\}[ \t]*\r?$', re.MULTILINE)


@dataclass
class MessageReading:
    """The protocol fields of a TurnResult, as read from one final message."""

    outcome: Outcome
    assistant_text: str
    final_data: dict[str, Any] | None = None
    interaction: Interaction | None = None
    ask_user_invalid: bool = False
    done_marker_found: bool = False
    repair_level: RepairLevel = "none"
    warnings: list[dict[str, str]] = field(default_factory=list)


# Costs stay linear in the message (R-FS2): objects nested deeper than this are never tried on
# their own (each character is parsed at most this many times over), and only this much of a
# message is scanned for embedded objects at all.
MAX_OBJECT_DEPTH = 8
MAX_SCANNED_CHARS = 4 * 1024 * 1024


def _object_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every ``{...}`` nested at most MAX_OBJECT_DEPTH deep, by start, found in
    one pass. Braces inside strings don't count; between objects, quotes are prose."""
    spans: list[tuple[int, int]] = []
    opened: list[int] = []
    in_string = escaped = False
    first = text.find("{")
    if first == -1:
        return spans
    for index in range(first, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"' and opened:
            in_string = True
        elif char == "{":
            opened.append(index)
        elif char == "}" and opened:
            start = opened.pop()
            if len(opened) < MAX_OBJECT_DEPTH:
                spans.append((start, index + 1))
    spans.sort()
    return spans


def balanced_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every top-level ``{...}`` in ``text`` that parses as a JSON object, left to right; an
    object that does not parse leaves the ones inside it to be tried."""
    taken_until = 0
    for start, end in _object_spans(text[:MAX_SCANNED_CHARS]):
        if start < taken_until:
            continue
        parsed = json_object(text[start:end])
        if parsed is not None:
            yield parsed
            taken_until = end


def _fenced_objects(text: str) -> Iterator[dict[str, Any]]:
    for pattern in (_FENCE_JSON, _FENCE_ANY):
        for match in pattern.finditer(text):
            parsed = json_object(match.group(1).strip())
            if parsed is not None:
                yield parsed


def extract_json(text: str) -> tuple[dict[str, Any] | None, RepairLevel]:
    """The deterministic ladder: whole text, trimmed, fenced (json first), first balanced object."""
    whole = json_object(text)
    if whole is not None:
        return whole, "none"
    # A bare {"__SKILL_DONE__": ...} quoted inside prose is neither data nor evidence (R-TP3 counts
    # it only as a standalone line, removed before this ladder runs).
    embedded = (obj for obj in balanced_objects(text) if set(obj) != {DONE_MARKER})
    for candidate in (json_object(text.strip()), next(_fenced_objects(text), None), next(embedded, None)):
        if candidate is not None:
            return candidate, "deterministic_generic"
    return None, "none"


def _envelope_body(obj: dict[str, Any]) -> tuple[bool, Any]:
    """(is an envelope, its interaction body) for either accepted envelope shape."""
    if "ask_user" in obj:
        return True, obj["ask_user"]
    if obj.get("outcome") == "ask_user":
        return True, obj.get("interaction")
    return False, None


def _normalise_options(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        return []
    options = []
    for item in raw:
        if isinstance(item, dict) and ("label" in item or "value" in item):
            label = item.get("label", item.get("value"))
            options.append({**item, "label": str(label), "value": item.get("value", label)})
        elif isinstance(item, str):
            options.append({"label": item, "value": item})
        elif item is not None:
            options.append({"label": json.dumps(item, ensure_ascii=False), "value": item})
    return options


def normalise_kind(raw: Any) -> str:
    """``kind`` is display metadata only (R-LC3): anything unknown becomes ``open_text``."""
    kind = raw.strip().lower() if isinstance(raw, str) else ""
    kind = KIND_ALIASES.get(kind, kind)
    return kind if kind in KINDS else "open_text"


class HintError(ValueError):
    """Hint data a kind cannot use; the question is then asked as open_text (R-LC3)."""


def _hint(body: dict[str, Any], ui_hints: dict[str, Any], key: str) -> Any:
    """A hint from the envelope body itself, else from its ui_hints (upstream's place for them)."""
    return body[key] if key in body else ui_hints.get(key)


def _text_or(value: Any, default: str, what: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or not value.strip():
        raise HintError(f"{what} must be a non-empty string")
    return value.strip()


def _flag(value: Any, default: bool, what: str) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise HintError(f"{what} must be true or false")
    return value


def _names(items: list[dict[str, Any]], what: str) -> None:
    names = [item["name"] for item in items]
    if len(set(names)) != len(names):
        raise HintError(f"two {what} have the same name")


def _name(item: dict[str, Any], what: str) -> str:
    name = _text_or(item.get("name"), "", f"a {what}'s name")
    if not name or len(name) > MAX_NAME_CHARS:
        raise HintError(f"a {what} needs a name of at most {MAX_NAME_CHARS} characters")
    return name


def _item(
    raw: Any,
    what: str,
    text_keys: tuple[str, ...],
    details: Callable[[dict[str, Any], str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A named item of a question's hints (a field, a file slot): its name, what `details` reads
    of it, whether it is required and those of `text_keys` it has."""
    if not isinstance(raw, dict):
        raise HintError(f"each {what} must be an object with a name")
    name = _name(raw, what)
    item = {"name": name, **(details(raw, name) if details else {})}
    item["required"] = _flag(raw.get("required"), False, f"{what} {name}'s required")
    for key in text_keys:
        if raw.get(key) is not None:
            item[key] = _text_or(raw.get(key), "", f"{what} {name}'s {key}")
    return item


def _label_and_type(raw: dict[str, Any], name: str) -> dict[str, Any]:
    kind = _text_or(raw.get("type"), "text", f"field {name}'s type").lower()
    if kind not in FIELD_TYPES:
        raise HintError(f"field {name} has type {kind!r}; known types: {', '.join(FIELD_TYPES)}")
    return {"label": _text_or(raw.get("label"), name, f"field {name}'s label"), "type": kind}


def _field(raw: Any) -> dict[str, Any]:
    return _item(raw, "field", ("hint",), _label_and_type)


def _file_slot(raw: Any) -> dict[str, Any]:
    return _item(raw, "file", ("hint", "accept"))


def _listed(raw: Any, parse: Callable[[Any], dict[str, Any]], what: str, *, needed: bool) -> list[dict[str, Any]]:
    if raw is None and not needed:
        return []
    if not isinstance(raw, list) or (needed and not raw):
        raise HintError(f"{what} must be a{' non-empty' if needed else ''} list")
    if len(raw) > MAX_ITEMS:
        raise HintError(f"at most {MAX_ITEMS} {what} may be asked for at once")
    items = [parse(item) for item in raw]
    _names(items, what)
    return items


# The one hint key each kind reads (from the envelope body, else from its ui_hints) and how its
# value is read; None leaves the key out. A question asked as another kind (or degraded to
# open_text) carries none of these keys, so no page renders half a form.
_KIND_HINTS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "choose_one": ("allow_free_text", lambda value: _flag(value, True, "allow_free_text")),
    "fill_fields": ("fields", lambda value: _listed(value, _field, "fields", needed=True)),
    "upload_files": ("files", lambda value: _listed(value, _file_slot, "files", needed=False)),
    "risk_ack": ("risk", lambda value: None if value is None else _text_or(value, "", "risk")),
}
KIND_HINT_KEYS = tuple(key for key, _ in _KIND_HINTS.values())


def kind_hints(kind: str, body: dict[str, Any], ui_hints: dict[str, Any], options: list[Any]) -> dict[str, Any]:
    """The hint data `kind` needs, read from the envelope and normalised; HintError when it cannot
    be used. choose_one: options (given apart) and `allow_free_text`; fill_fields: `fields`
    (name, label, type, required, hint?); upload_files: `files` slots (name, required, hint?,
    accept?), may be empty; risk_ack: the `risk` statement (the prompt when not given)."""
    if kind == "choose_one" and not options:
        raise HintError("choose_one needs options")
    if kind not in _KIND_HINTS:
        return {}
    key, read = _KIND_HINTS[kind]
    value = read(_hint(body, ui_hints, key))
    return {} if value is None else {key: value}


def parse_interaction(body: Any) -> tuple[Interaction | None, str]:
    """A normalised Interaction from an envelope body, or (None, why it is unusable).

    Hint data its kind cannot use never makes the envelope unusable: the question is asked as
    open_text, and the second element says why (R-LC3: kind is display metadata).
    """
    if not isinstance(body, dict):
        return None, "the ask_user payload is not a JSON object"
    interaction_id = body.get("interaction_id")
    if isinstance(interaction_id, bool) or not isinstance(interaction_id, int) or interaction_id <= 0:
        return None, "interaction_id must be a positive integer"
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return None, "prompt must be a non-empty string"
    policy = body.get("default_decision_policy")
    given_hints = body["ui_hints"] if isinstance(body.get("ui_hints"), dict) else {}
    options = _normalise_options(_hint(body, given_hints, "options"))
    # Not `_hint`: a blank kind in the body still leaves ui_hints' kind to say.
    kind = normalise_kind(body.get("kind") or given_hints.get("kind"))
    ui_hints = {key: value for key, value in given_hints.items() if key not in KIND_HINT_KEYS}
    degraded = ""
    try:
        hints = kind_hints(kind, body, given_hints, options)
    except HintError as exc:
        kind, hints, degraded = "open_text", {}, f"{kind} asked as open_text: {exc}"
    if "kind" in ui_hints:
        ui_hints["kind"] = kind  # upstream's clients read the kind there too
    required = [field["name"] for field in hints.get("fields", []) if field["required"]]
    return (
        Interaction(
            interaction_id=interaction_id,
            prompt=prompt.strip(),
            kind=kind,
            options=options,
            required_fields=required
            or (body["required_fields"] if isinstance(body.get("required_fields"), list) else []),
            context=body["context"] if isinstance(body.get("context"), dict) else {},
            ui_hints={**ui_hints, **hints},
            default_decision_policy=policy if isinstance(policy, str) and policy.strip() else DEFAULT_DECISION_POLICY,
        ),
        degraded,
    )


def _find_envelope(data: dict[str, Any] | None, text: str) -> tuple[bool, Any]:
    """Control signals first (R-TP2): an envelope may sit anywhere in the message, not only in
    the object the extraction ladder picked."""
    candidates = [data] if data is not None else []
    candidates += list(_fenced_objects(text)) + list(balanced_objects(text))
    for candidate in candidates:
        found, body = _envelope_body(candidate)
        if found:
            return True, body
    return False, None


def interpret_final_message(text: str, mode: ExecutionMode) -> MessageReading:
    """Read done marker, ask_user envelope and result data from the agent's final message."""
    marker_line = bool(_MARKER_LINE.search(text))
    # Standalone marker lines are a control signal, not data: drop them before extraction so the
    # result object next to them is what the ladder finds.
    data, repair = extract_json(_MARKER_LINE.sub("", text) if marker_line else text)
    has_envelope, body = _find_envelope(data, text)
    if data is not None and _envelope_body(data)[0]:
        data, repair = None, "none"
    marker_key = data is not None and data.get(DONE_MARKER) is True
    if data is not None:
        data = {key: value for key, value in data.items() if key != DONE_MARKER}
    reading = MessageReading(outcome="final", assistant_text=text, final_data=data, repair_level=repair)
    reading.done_marker_found = marker_line or marker_key
    if data is not None and repair == "deterministic_generic":
        reading.warnings.append(
            {"code": WARNING_REPAIRED, "message": "the result JSON was recovered from surrounding text"}
        )
    if mode == "auto" or reading.done_marker_found or (data is not None and not has_envelope):
        return reading
    reading.outcome = "ask_user"
    if has_envelope:
        reading.interaction, problem = parse_interaction(body)
        if reading.interaction is None:
            reading.ask_user_invalid = True
            reading.warnings.append(
                {"code": WARNING_ASK_USER_INVALID, "message": f"ask_user envelope ignored: {problem}"}
            )
        elif problem:
            reading.warnings.append({"code": WARNING_HINTS_INVALID, "message": problem})
    return reading
