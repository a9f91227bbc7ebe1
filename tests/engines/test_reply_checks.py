"""Replies read as text (R-LC3, R-LC5): a structured reply (the form a page sends) in words, any
other value as it is or as JSON; nothing here judges a reply against its question."""

from __future__ import annotations

import pytest

from engines.prompt import reply_prompt
from engines.replies import is_structured, question_fields, readable_reply


@pytest.mark.parametrize(
    "response",
    [
        {"choice": "formal"},  # choose_one
        {"choice": {"id": 2}},
        {"confirmed": False},  # confirm
        {"fields": {}},  # fill_fields
        {"acknowledged": True},  # risk_ack
    ],
)
def test_the_forms_the_pages_send_are_structured(response: object) -> None:
    assert is_structured(response)


@pytest.mark.parametrize(
    "response",
    [
        "any words",
        {"text": "typed"},
        {"city": "Oslo"},
        3,
        None,
        ["a"],
        {"choice": "a", "confirmed": True},  # two keys: not one of the forms
        {"confirmed": "sure"},
        {"acknowledged": 1},
        {"fields": ["Tides"]},
    ],
)
def test_other_values_are_not_structured(response: object) -> None:
    assert not is_structured(response)


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
        # A form that does not fit the question asked, or whose value has another shape, reads as
        # its words or its JSON: whatever the person sent, it reaches the agent unrefused.
        ({"choice": "rude"}, "rude"),
        ({"fields": {"year": "2024", "colour": "red"}}, "year: 2024\ncolour: red"),
        ({"confirmed": "sure"}, '{"confirmed":"sure"}'),
        ({"acknowledged": 1}, '{"acknowledged":1}'),
        ({"fields": ["Tides"]}, '{"fields":["Tides"]}'),
        ({"fields": "Tides"}, '{"fields":"Tides"}'),
    ],
)
def test_every_reply_reads_as_text(response: object, text: str) -> None:
    assert readable_reply(response) == text


def test_the_agent_reads_a_structured_reply_in_words() -> None:
    assert reply_prompt({"fields": {"title": "Tides", "year": 2024}}) == "title: Tides\nyear: 2024"
    assert reply_prompt({"confirmed": True}) == "Yes"


def test_a_form_reads_in_its_questions_order_whatever_order_its_object_came_in() -> None:
    """PostgreSQL's jsonb hands a stored object back with its keys sorted (shorter first)."""
    pending = {"kind": "fill_fields", "ui_hints": {"fields": [{"name": "title"}, {"name": "year"}]}}
    stored = {"fields": {"note": "extra", "year": 2024, "title": "Tides"}}
    assert readable_reply(stored, question_fields(pending)) == "title: Tides\nyear: 2024\nnote: extra"
    assert question_fields({"kind": "open_text"}) == []
