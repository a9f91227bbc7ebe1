"""A person's reply to a question, in the form its kind suggests, and how it reads as text.

Free text answers every kind (R-LC3, R-LC5): a string, upstream's `{"text": "…"}`, or any other
JSON value is taken as it is, so upstream's clients keep working whatever the agent asked. A
*structured* reply is an object of exactly one of these forms, and is checked against the
question it answers:

- `{"choice": <value>}` answers choose_one: the value of one of its options;
- `{"confirmed": true|false}` answers confirm;
- `{"fields": {<name>: <value>, …}}` answers fill_fields: every required field given, each value
  of its field's type, no field the question did not ask for;
- `{"acknowledged": true|false}` answers risk_ack (false declines the risk).

Files (upload_files) come through the file-reply path (R-UP6) and are recorded as
`{"text", "files"}`. The agent reads every reply as text (`readable_reply`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

FORMS = {"choice": "choose_one", "confirmed": "confirm", "fields": "fill_fields", "acknowledged": "risk_ack"}
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


@dataclass(frozen=True)
class ReplyProblem:
    """Why a structured reply cannot answer its question: a stable code, a message, and for a
    form the problem of each field by name."""

    code: str
    message: str
    errors: dict[str, str] = field(default_factory=dict)


def structured_kind(response: Any) -> str | None:
    """The kind a structured reply answers, or None for free text."""
    if isinstance(response, dict) and len(response) == 1:
        return FORMS.get(next(iter(response)))
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_date(value: Any) -> bool:
    try:
        return isinstance(value, str) and date.fromisoformat(value).isoformat() == value
    except ValueError:
        return False


_TYPE_CHECKS = {
    "text": (lambda value: isinstance(value, str), "text"),
    "textarea": (lambda value: isinstance(value, str), "text"),
    "number": (_is_number, "a number"),
    "integer": (lambda value: isinstance(value, int) and not isinstance(value, bool), "a whole number"),
    "boolean": (lambda value: isinstance(value, bool), "true or false"),
    "date": (_is_date, "a date as YYYY-MM-DD"),
    "email": (lambda value: isinstance(value, str) and bool(_EMAIL.match(value)), "an e-mail address"),
}


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def field_errors(fields: list[Mapping[str, Any]], values: Any) -> dict[str, str]:
    """The problem of each field of a fill_fields reply, by field name ("" for the whole reply)."""
    if not isinstance(values, dict):
        return {"": "fields must be an object of field values by name"}
    asked = {spec["name"]: spec for spec in fields}
    errors = {name: "this field was not asked for" for name in values if name not in asked}
    for name, spec in asked.items():
        value = values.get(name)
        if _blank(value):
            if spec.get("required"):
                errors[name] = "this field is required"
            continue
        check, expected = _TYPE_CHECKS.get(spec.get("type", "text"), _TYPE_CHECKS["text"])
        if not check(value):
            errors[name] = f"expected {expected}"
    return errors


def reply_problem(pending: Mapping[str, Any], response: Any) -> ReplyProblem | None:
    """What is wrong with `response` as the answer to `pending` (its pending payload), or None.
    Only structured replies are checked: free text always answers (R-LC3)."""
    kind = structured_kind(response)
    if kind is None:
        return None
    asked = pending.get("kind") or "open_text"
    if kind != asked:
        return ReplyProblem(
            "REPLY_KIND_MISMATCH", f"a {next(iter(response))!r} reply answers a {kind} question; this one is {asked}"
        )
    hints = pending.get("ui_hints") or {}
    if kind == "choose_one":
        values = [option.get("value", option.get("label")) for option in pending.get("options") or []]
        if not any(json.dumps(response["choice"], sort_keys=True) == json.dumps(v, sort_keys=True) for v in values):
            return ReplyProblem("REPLY_CHOICE_UNKNOWN", "choice must be the value of one of the question's options")
    elif kind == "fill_fields":
        errors = field_errors(hints.get("fields") or [], response["fields"])
        if errors:
            return ReplyProblem("REPLY_FIELDS_INVALID", "the form's values do not fit its fields", errors)
    elif not isinstance(next(iter(response.values())), bool):
        form = next(iter(response))
        return ReplyProblem(f"REPLY_{form.upper()}_INVALID", f"{form} must be true or false")
    return None


def _value_text(value: Any) -> str:
    if isinstance(value, str) and "\n" not in value:
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _structured_text(response: dict[str, Any]) -> str:
    form, value = next(iter(response.items()))
    if form == "choice":
        return _value_text(value)
    if form == "confirmed":
        return "Yes" if value else "No"
    if form == "acknowledged":
        return "I acknowledge the risk; go ahead." if value else "I do not accept the risk; do not go ahead."
    filled = [f"{name}: {_value_text(item)}" for name, item in value.items() if not _blank(item)]
    return "\n".join(filled) or "(the form was sent empty)"


def readable_reply(response: Any) -> str:
    """A reply as a person and the agent read it: text as it is; `{"text": "…"}` (how upstream's
    clients send typed text) as that text; a structured reply in words; a reply with files as its
    text and the files' names; any other value as compact JSON."""
    if isinstance(response, str):
        return response
    if structured_kind(response) is not None:
        return _structured_text(response)
    if isinstance(response, dict) and isinstance(response.get("text"), str):
        if set(response) == {"text"}:
            return response["text"]
        if set(response) == {"text", "files"} and isinstance(response["files"], list):
            names = ", ".join(str(item.get("name", "")) for item in response["files"] if isinstance(item, dict))
            return "\n\n".join(part for part in (response["text"], f"Files: {names}" if names else "") if part)
    return json.dumps(response, ensure_ascii=False, separators=(",", ":"))
