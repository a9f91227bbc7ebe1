"""Structured replies per question kind: checked against the question they answer, read by the
agent as text; free text answers every kind (R-LC3, R-LC5)."""

from __future__ import annotations

import pytest

from engines.prompt import reply_prompt
from engines.replies import readable_reply, reply_problem, structured_kind

CHOOSE = {"kind": "choose_one", "options": [{"label": "Formal", "value": "formal"}, {"label": "Two", "value": 2}]}
FORM = {
    "kind": "fill_fields",
    "ui_hints": {
        "fields": [
            {"name": "title", "label": "Title", "type": "text", "required": True},
            {"name": "year", "label": "Year", "type": "integer", "required": False},
            {"name": "score", "label": "Score", "type": "number", "required": False},
            {"name": "open", "label": "Open access", "type": "boolean", "required": False},
            {"name": "due", "label": "Due", "type": "date", "required": False},
            {"name": "mail", "label": "Mail", "type": "email", "required": False},
            {"name": "notes", "label": "Notes", "type": "textarea", "required": False},
        ]
    },
}


def _code(pending: dict, response: object) -> str | None:
    problem = reply_problem(pending, response)
    return problem.code if problem else None


@pytest.mark.parametrize("kind", ["open_text", "choose_one", "confirm", "fill_fields", "upload_files", "risk_ack"])
@pytest.mark.parametrize("response", ["any words", {"text": "typed"}, {"city": "Oslo"}, 3, None, ["a"]])
def test_free_text_and_other_values_answer_every_kind(kind: str, response: object) -> None:
    assert structured_kind(response) is None
    assert reply_problem({**FORM, **CHOOSE, "kind": kind}, response) is None


def test_a_choice_must_be_one_of_the_options_values() -> None:
    assert _code(CHOOSE, {"choice": "formal"}) is None
    assert _code(CHOOSE, {"choice": 2}) is None
    assert _code(CHOOSE, {"choice": "Formal"}) == "REPLY_CHOICE_UNKNOWN"  # the label is not the value
    assert _code(CHOOSE, {"choice": "2"}) == "REPLY_CHOICE_UNKNOWN"


@pytest.mark.parametrize("form,kind", [("confirmed", "confirm"), ("acknowledged", "risk_ack")])
def test_yes_no_forms_take_booleans_only(form: str, kind: str) -> None:
    assert _code({"kind": kind}, {form: True}) is None
    assert _code({"kind": kind}, {form: False}) is None
    assert _code({"kind": kind}, {form: "yes"}) == f"REPLY_{form.upper()}_INVALID"


@pytest.mark.parametrize(
    "pending,response",
    [
        ({"kind": "open_text"}, {"choice": "a"}),
        ({"kind": "confirm"}, {"acknowledged": True}),
        (CHOOSE, {"fields": {}}),
        ({"kind": "upload_files"}, {"confirmed": True}),
        ({}, {"confirmed": True}),
    ],
)
def test_a_structured_reply_must_answer_the_kind_asked(pending: dict, response: object) -> None:
    assert _code(pending, response) == "REPLY_KIND_MISMATCH"


def test_a_complete_form_of_the_right_types_is_accepted() -> None:
    values = {
        "title": "Tides",
        "year": 2024,
        "score": 4.5,
        "open": False,
        "due": "2026-12-24",
        "mail": "a@b.org",
        "notes": "x\ny",
    }
    assert reply_problem(FORM, {"fields": values}) is None
    assert (
        reply_problem(FORM, {"fields": {"title": "Tides", "year": None, "notes": ""}}) is None
    )  # optional ones left out


def test_every_field_problem_is_named() -> None:
    problem = reply_problem(
        FORM,
        {
            "fields": {
                "title": "  ",
                "year": 2.5,
                "score": "4",
                "open": "no",
                "due": "2026-02-30",
                "mail": "nobody",
                "extra": 1,
            }
        },
    )
    assert problem is not None and problem.code == "REPLY_FIELDS_INVALID"
    assert problem.errors == {
        "title": "this field is required",
        "year": "expected a whole number",
        "score": "expected a number",
        "open": "expected true or false",
        "due": "expected a date as YYYY-MM-DD",
        "mail": "expected an e-mail address",
        "extra": "this field was not asked for",
    }
    assert reply_problem(FORM, {"fields": ["Tides"]}).errors == {"": "fields must be an object of field values by name"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "response,text",
    [
        ("Kyoto", "Kyoto"),
        ({"text": "Kyoto"}, "Kyoto"),
        ({"choice": "formal"}, "formal"),
        ({"choice": {"id": 2}}, '{"id":2}'),
        ({"confirmed": True}, "Yes"),
        ({"confirmed": False}, "No"),
        ({"acknowledged": True}, "I acknowledge the risk; go ahead."),
        ({"acknowledged": False}, "I do not accept the risk; do not go ahead."),
        (
            {"fields": {"title": "Tides", "year": 2024, "notes": "a\nb", "empty": ""}},
            'title: Tides\nyear: 2024\nnotes: "a\\nb"',
        ),
        ({"fields": {}}, "(the form was sent empty)"),
        ({"text": "see", "files": [{"name": "a.pdf"}, {"name": "b.csv"}]}, "see\n\nFiles: a.pdf, b.csv"),
        ({"text": "", "files": [{"name": "a.pdf"}]}, "Files: a.pdf"),
        ({"city": "Oslo"}, '{"city":"Oslo"}'),
    ],
)
def test_every_reply_reads_as_text(response: object, text: str) -> None:
    assert readable_reply(response) == text


def test_the_agent_reads_a_structured_reply_in_words() -> None:
    assert reply_prompt({"fields": {"title": "Tides", "year": 2024}}) == "title: Tides\nyear: 2024"
    assert reply_prompt({"confirmed": True}) == "Yes"
