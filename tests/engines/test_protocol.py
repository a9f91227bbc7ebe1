"""The engine-neutral final-message protocol (R-TP1..R-TP5; seed: 引擎适配层 MUST 输出统一回合协议)."""

from __future__ import annotations

import json

import pytest

from engines.protocol import (
    WARNING_ASK_USER_INVALID,
    WARNING_HINTS_INVALID,
    WARNING_REPAIRED,
    balanced_objects,
    extract_json,
    interpret_final_message,
    normalise_kind,
)

# --- JSON extraction ladder (R-TP2) -------------------------------------------------------------


def test_whole_text_json_needs_no_repair() -> None:
    assert extract_json('{"a": 1}') == ({"a": 1}, "none")


def test_json_whitespace_around_the_object_is_still_step_one() -> None:
    assert extract_json('  \n{"a": 1}\n\n  ') == ({"a": 1}, "none")


def test_trimmed_text_is_a_generic_repair() -> None:
    # Whitespace JSON itself rejects (no-break space, ideographic space) is trimmed by step 2.
    assert extract_json('\u00a0{"a": 1}\u3000') == ({"a": 1}, "deterministic_generic")


def test_fenced_json_block_wins_over_other_fences() -> None:
    text = 'Notes:\n```\n{"b": 2}\n```\nResult:\n```json\n{"a": 1}\n```\n'
    assert extract_json(text) == ({"a": 1}, "deterministic_generic")


def test_any_fence_when_no_json_fence() -> None:
    assert extract_json('Here:\n```text\n{"b": 2}\n```') == ({"b": 2}, "deterministic_generic")


def test_first_balanced_object_with_braces_inside_strings() -> None:
    text = 'The result is {"a": "curly } and { inside", "b": "quote \\" here"} and {"c": 3}.'
    assert extract_json(text) == ({"a": "curly } and { inside", "b": 'quote " here'}, "deterministic_generic")


def test_balanced_scanner_skips_prose_braces() -> None:
    assert list(balanced_objects('set {x} then {"a": {"b": 1}} and {"c": 2}')) == [{"a": {"b": 1}}, {"c": 2}]


def test_prose_quotes_between_objects_do_not_hide_the_next_one() -> None:
    assert list(balanced_objects('{"a": 1} is 12" wide; then {"b": 2}')) == [{"a": 1}, {"b": 2}]


@pytest.mark.timeout(30)  # generous: the quadratic scan took hours on these
@pytest.mark.parametrize(
    "text",
    [
        "{" * 400_000,
        "{" * 200_000 + "}" * 200_000,
        'x {"a": ' * 50_000 + "}" * 50_000,
        "{} " * 100_000,
    ],
    ids=["open-braces", "deep-nesting", "deep-unparsable", "many-empty"],
)
def test_hostile_final_message_costs_linear_work_R_FS2(text, monkeypatch) -> None:
    """Every character is handed to the JSON parser a bounded number of times."""
    import engines.protocol as protocol

    parsed_chars = []
    real = protocol.json_object

    def counting(candidate):
        parsed_chars.append(len(candidate))
        return real(candidate)

    monkeypatch.setattr(protocol, "json_object", counting)
    reading = interpret_final_message(text, "interactive")
    assert reading.interaction is None
    # Two reads (the data ladder, the envelope search), each: the whole text twice, then spans.
    assert sum(parsed_chars) <= 2 * (protocol.MAX_OBJECT_DEPTH + 2) * len(text)


def test_no_json_at_all() -> None:
    assert extract_json("just words, {not json}") == (None, "none")


def test_json_arrays_are_not_result_objects() -> None:
    assert extract_json("[1, 2]") == (None, "none")


# --- done marker (R-TP3) -----------------------------------------------------------------------


def test_done_marker_as_json_key_is_found_and_stripped() -> None:
    reading = interpret_final_message('{"answer": 42, "__SKILL_DONE__": true}', "interactive")
    assert reading.outcome == "final"
    assert reading.done_marker_found is True
    assert reading.final_data == {"answer": 42}
    assert reading.repair_level == "none" and reading.warnings == []


def test_done_marker_as_standalone_line_next_to_the_result() -> None:
    text = 'All done.\n```json\n{"answer": 42}\n```\n{"__SKILL_DONE__": true}\n'
    reading = interpret_final_message(text, "interactive")
    assert reading.done_marker_found is True
    assert reading.final_data == {"answer": 42}


def test_standalone_marker_line_before_the_result_is_not_taken_as_data() -> None:
    reading = interpret_final_message('{"__SKILL_DONE__": true}\n{"answer": 42}', "interactive")
    assert reading.done_marker_found is True
    assert reading.final_data == {"answer": 42}


def test_marker_false_is_not_done_but_still_stripped() -> None:
    reading = interpret_final_message('{"answer": 1, "__SKILL_DONE__": false}', "interactive")
    assert reading.done_marker_found is False
    assert reading.final_data == {"answer": 1}


def test_marker_mentioned_in_prose_is_not_evidence() -> None:
    reading = interpret_final_message('I will add "__SKILL_DONE__": true once finished. Which color?', "interactive")
    assert reading.done_marker_found is False
    assert reading.outcome == "ask_user"


def test_repaired_output_sets_level_and_warning() -> None:
    reading = interpret_final_message('Result:\n```json\n{"a": 1, "__SKILL_DONE__": true}\n```', "auto")
    assert reading.repair_level == "deterministic_generic"
    assert [w["code"] for w in reading.warnings] == [WARNING_REPAIRED]


# --- ask_user envelopes (R-TP4, R-TP5) -----------------------------------------------------------


def test_adapter_returns_ask_user_with_structured_interaction() -> None:
    text = 'Before I go on:\n{"ask_user": {"interaction_id": 3, "kind": "decision", "prompt": "Formal or casual?", "options": ["formal", {"label": "Casual", "value": "casual"}]}}'
    reading = interpret_final_message(text, "interactive")
    assert reading.outcome == "ask_user"
    assert reading.ask_user_invalid is False
    interaction = reading.interaction
    assert interaction is not None
    assert interaction.as_dict() == {
        "interaction_id": 3,
        "kind": "choose_one",
        "prompt": "Formal or casual?",
        "options": [{"label": "formal", "value": "formal"}, {"label": "Casual", "value": "casual"}],
        "ui_hints": {"allow_free_text": True},
        "default_decision_policy": "engine_judgement",
        "required_fields": [],
        "context": {},
    }
    assert reading.final_data is None
    assert reading.assistant_text == text


def test_outcome_interaction_envelope_shape() -> None:
    text = '{"outcome": "ask_user", "interaction": {"interaction_id": 1, "prompt": "Proceed?", "kind": "confirmation", "default_decision_policy": "safe_default"}}'
    reading = interpret_final_message(text, "interactive")
    assert reading.outcome == "ask_user"
    assert reading.interaction is not None
    assert reading.interaction.kind == "confirm"
    assert reading.interaction.default_decision_policy == "safe_default"


def test_envelope_found_anywhere_in_the_message() -> None:
    text = 'Context: {"seen": 1}\n```json\n{"ask_user": {"interaction_id": 2, "prompt": "Which file?"}}\n```'
    reading = interpret_final_message(text, "interactive")
    assert reading.outcome == "ask_user"
    assert reading.interaction is not None and reading.interaction.prompt == "Which file?"


@pytest.mark.parametrize(
    "body",
    [
        '{"prompt": "Which?"}',  # no interaction_id
        '{"interaction_id": 0, "prompt": "Which?"}',
        '{"interaction_id": "1", "prompt": "Which?"}',
        '{"interaction_id": true, "prompt": "Which?"}',
        '{"interaction_id": 1}',  # no prompt
        '{"interaction_id": 1, "prompt": "   "}',
        '"Which?"',
    ],
)
def test_ask_user_missing_required_fields_is_reported_invalid(body: str) -> None:
    """Seed "ask_user 缺少必填字段", per SPEC R-TP5 decision: the adapter reports the envelope
    invalid and never uses it as the interaction; the orchestrator then waits with a backend-built
    pending instead of failing the turn."""
    reading = interpret_final_message('{"ask_user": ' + body + "}", "interactive")
    assert reading.ask_user_invalid is True
    assert reading.interaction is None
    assert reading.outcome == "ask_user"
    assert reading.final_data is None
    assert [w["code"] for w in reading.warnings] == [WARNING_ASK_USER_INVALID]


@pytest.mark.parametrize(
    "raw,kind",
    [
        (None, "open_text"),
        ("fill_fields", "fill_fields"),
        ("risk_ack", "risk_ack"),
        ("survey", "open_text"),
        ("decision", "choose_one"),
        ("single_select", "choose_one"),
        ("Confirmation", "confirm"),
        ("clarification", "open_text"),
        ("upload_files", "upload_files"),
        (7, "open_text"),
    ],
)
def test_kind_is_normalised_never_rejected(raw: object, kind: str) -> None:
    assert normalise_kind(raw) == kind


def test_options_and_optional_fields_are_normalised() -> None:
    text = '{"ask_user": {"interaction_id": 1, "prompt": "Pick", "options": [1, {"value": "v"}, null], "required_fields": "x", "context": {"step": 2}, "ui_hints": {"hint": "h"}, "default_decision_policy": ""}}'
    interaction = interpret_final_message(text, "interactive").interaction
    assert interaction is not None
    assert interaction.options == [{"label": "1", "value": 1}, {"label": "v", "value": "v"}]
    assert interaction.required_fields == []
    assert interaction.context == {"step": 2}
    assert interaction.ui_hints == {"hint": "h"}
    assert interaction.default_decision_policy == "engine_judgement"


# --- outcome rules --------------------------------------------------------------------------------


def test_plain_text_in_interactive_mode_is_a_question_not_an_error() -> None:
    reading = interpret_final_message("What is your name?", "interactive")
    assert reading.outcome == "ask_user"
    assert reading.interaction is None and reading.ask_user_invalid is False
    assert reading.assistant_text == "What is your name?"


def test_adapter_returns_final_with_data_for_schema_validation() -> None:
    reading = interpret_final_message('{"greeting": "hi"}', "interactive")
    assert reading.outcome == "final"
    assert reading.final_data == {"greeting": "hi"}
    assert reading.done_marker_found is False


def test_done_marker_wins_over_an_envelope() -> None:
    text = '{"ask_user": {"interaction_id": 1, "prompt": "More?"}}\n{"__SKILL_DONE__": true}'
    reading = interpret_final_message(text, "interactive")
    assert reading.outcome == "final" and reading.done_marker_found is True


def test_data_next_to_an_envelope_is_still_a_question() -> None:
    text = '{"draft": "x"}\n{"ask_user": {"interaction_id": 1, "prompt": "Is the draft ok?"}}'
    reading = interpret_final_message(text, "interactive")
    assert reading.outcome == "ask_user"
    assert reading.interaction is not None


def test_auto_mode_is_always_final() -> None:
    assert interpret_final_message('{"a": 1}', "auto").final_data == {"a": 1}
    plain = interpret_final_message("I could not decide.", "auto")
    assert plain.outcome == "final" and plain.final_data is None
    envelope = interpret_final_message('{"ask_user": {"interaction_id": 1, "prompt": "Which?"}}', "auto")
    assert envelope.outcome == "final"
    assert envelope.final_data is None and envelope.interaction is None


# --- the six kinds and their hint data (R-LC3: unusable hints degrade to open_text) --------------


def _asked(body: dict) -> tuple:
    reading = interpret_final_message(
        json.dumps({"ask_user": {"interaction_id": 1, "prompt": "Q?", **body}}), "interactive"
    )
    assert reading.interaction is not None
    return reading.interaction, [w["code"] for w in reading.warnings]


def test_choose_one_keeps_its_options_and_whether_free_text_is_allowed() -> None:
    interaction, warnings = _asked({"kind": "choose_one", "options": ["a", "b"], "allow_free_text": False})
    assert (interaction.kind, interaction.ui_hints, warnings) == ("choose_one", {"allow_free_text": False}, [])
    assert [o["value"] for o in interaction.options] == ["a", "b"]


def test_choose_one_reads_upstreams_ui_hints_too() -> None:
    interaction, _ = _asked({"ui_hints": {"kind": "choose_one", "options": [{"label": "A", "value": 1}], "hint": "h"}})
    assert interaction.kind == "choose_one"
    assert interaction.options == [{"label": "A", "value": 1}]
    assert interaction.ui_hints == {
        "kind": "choose_one",
        "options": [{"label": "A", "value": 1}],
        "hint": "h",
        "allow_free_text": True,
    }


def test_fill_fields_normalises_each_field_and_lists_the_required_ones() -> None:
    fields = [
        {"name": "title", "label": "Title", "required": True},
        {"name": "year", "type": "Integer"},
        {"name": "notes", "type": "textarea", "hint": "anything else"},
    ]
    interaction, warnings = _asked({"kind": "fill_fields", "fields": fields})
    assert warnings == []
    assert interaction.kind == "fill_fields"
    assert interaction.ui_hints["fields"] == [
        {"name": "title", "label": "Title", "type": "text", "required": True},
        {"name": "year", "label": "year", "type": "integer", "required": False},
        {"name": "notes", "label": "notes", "type": "textarea", "required": False, "hint": "anything else"},
    ]
    assert interaction.required_fields == ["title"]


def test_upload_files_slots_are_optional_and_normalised() -> None:
    interaction, _ = _asked({"kind": "upload_files"})
    assert (interaction.kind, interaction.ui_hints) == ("upload_files", {"files": []})
    interaction, _ = _asked(
        {"kind": "upload_files", "ui_hints": {"files": [{"name": "paper", "accept": ".pdf", "required": True}]}}
    )
    assert interaction.ui_hints == {"files": [{"name": "paper", "required": True, "accept": ".pdf"}]}


def test_risk_ack_carries_its_statement_or_uses_the_prompt() -> None:
    interaction, _ = _asked({"kind": "risk_ack", "risk": "  This deletes 40 files.  "})
    assert (interaction.kind, interaction.ui_hints) == ("risk_ack", {"risk": "This deletes 40 files."})
    interaction, _ = _asked({"kind": "risk_ack"})
    assert (interaction.kind, interaction.ui_hints) == ("risk_ack", {})


def test_confirm_and_open_text_need_no_hints() -> None:
    for kind in ("confirm", "open_text"):
        interaction, warnings = _asked({"kind": kind, "fields": [{"name": "x"}]})
        assert (interaction.kind, interaction.ui_hints, warnings) == (kind, {}, [])


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "choose_one"},
        {"kind": "choose_one", "options": []},
        {"kind": "choose_one", "options": ["a"], "allow_free_text": "no"},
        {"kind": "fill_fields"},
        {"kind": "fill_fields", "fields": []},
        {"kind": "fill_fields", "fields": "title"},
        {"kind": "fill_fields", "fields": [{"label": "no name"}]},
        {"kind": "fill_fields", "fields": [{"name": "a"}, {"name": "a"}]},
        {"kind": "fill_fields", "fields": [{"name": "a", "type": "colour"}]},
        {"kind": "fill_fields", "fields": [{"name": "a", "required": "yes"}]},
        {"kind": "fill_fields", "fields": [{"name": "x" * 65}]},
        {"kind": "fill_fields", "fields": [{"name": f"f{i}"} for i in range(21)]},
        {"kind": "upload_files", "files": {"name": "paper"}},
        {"kind": "upload_files", "files": [{"name": "a", "accept": 3}]},
        {"kind": "risk_ack", "risk": ["a"]},
        {"kind": "risk_ack", "risk": " "},
    ],
)
def test_unusable_hints_ask_the_question_as_open_text_with_a_warning(body: dict) -> None:
    interaction, warnings = _asked({**body, "ui_hints": {"kind": body["kind"], "hint": "kept"}})
    assert interaction.kind == "open_text"
    assert interaction.ui_hints == {"kind": "open_text", "hint": "kept"}  # no half-usable hint data left
    assert interaction.prompt == "Q?"
    assert warnings == [WARNING_HINTS_INVALID]
