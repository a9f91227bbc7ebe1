"""A person's reply to a question, and how it reads as text.

Any JSON value answers any question (R-LC3): `kind` is display metadata, and the service never
checks a reply against it or its hint data. Upstream's clients send text (a string or
`{"text": "…"}`); the pages send a *structured* reply, an object of exactly one of these forms:

- `{"choice": <value>}` (choose_one's buttons: an option's value);
- `{"confirmed": true|false}` (confirm);
- `{"fields": {<name>: <value>, …}}` (fill_fields; the page checks the form before sending);
- `{"acknowledged": true|false}` (risk_ack; false declines the risk).

Files (upload_files) come through the file-reply path (R-UP6) and are recorded as
`{"text", "files"}`. The agent reads every reply as text (`readable_reply`): a structured reply in
words, whatever the question was; an object of another shape as its JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# A structured reply's one key and the shape its value must have to be read in words ("true"
# for `{"confirmed": "sure"}` would put words in the person's mouth).
FORMS: dict[str, type] = {
    "choice": object,  # choose_one
    "confirmed": bool,  # confirm
    "fields": dict,  # fill_fields
    "acknowledged": bool,  # risk_ack
}


def compact_json(value: Any) -> str:
    """`value` as JSON without spaces, non-ASCII characters as they are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def is_structured(response: Any) -> bool:
    """Whether this is one of the forms the pages send (not text or any other value)."""
    if not (isinstance(response, dict) and len(response) == 1):
        return False
    form, value = next(iter(response.items()))
    return form in FORMS and isinstance(value, FORMS[form])


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _value_text(value: Any) -> str:
    if isinstance(value, str) and "\n" not in value:
        return value
    return compact_json(value)


def question_fields(pending: Mapping[str, Any]) -> list[str]:
    """The names of a fill_fields question's fields, in the form's order."""
    fields = (pending.get("ui_hints") or {}).get("fields") or []
    return [spec["name"] for spec in fields if isinstance(spec, dict) and isinstance(spec.get("name"), str)]


def _structured_text(response: dict[str, Any], field_order: Sequence[str]) -> str:
    form, value = next(iter(response.items()))
    if form == "choice":
        return _value_text(value)
    if form == "confirmed":
        return "Yes" if value else "No"
    if form == "acknowledged":
        return "I acknowledge the risk; go ahead." if value else "I do not accept the risk; do not go ahead."
    # In the form's order, whatever order the reply's object came in (PostgreSQL's jsonb sorts keys).
    rank = {name: index for index, name in enumerate(field_order)}
    ordered = sorted(value.items(), key=lambda item: rank.get(item[0], len(rank)))
    filled = [f"{name}: {_value_text(item)}" for name, item in ordered if not _blank(item)]
    return "\n".join(filled) or "(the form was sent empty)"


def readable_reply(response: Any, field_order: Sequence[str] = ()) -> str:
    """A reply as a person and the agent read it: text as it is; `{"text": "…"}` (how upstream's
    clients send typed text) as that text; a structured reply in words; a reply with files as its
    text and the files' names; any other value as compact JSON. A form's fields read in
    `field_order` (the question's, `question_fields`), any others after them."""
    if isinstance(response, str):
        return response
    if is_structured(response):
        return _structured_text(response, field_order)
    if isinstance(response, dict) and isinstance(response.get("text"), str):
        if set(response) == {"text"}:
            return response["text"]
        if set(response) == {"text", "files"} and isinstance(response["files"], list):
            names = ", ".join(str(item.get("name", "")) for item in response["files"] if isinstance(item, dict))
            return "\n\n".join(part for part in (response["text"], f"Files: {names}" if names else "") if part)
    return compact_json(response)
