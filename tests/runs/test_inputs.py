"""runs.inputs (R-AD5, upstream §1.5): schema validation of input/parameter, file inputs and their paths."""

from __future__ import annotations

import pytest

from kernel.errors import ApplicationError
from runs.inputs import (
    file_fields,
    missing_required_files,
    required_file_fields,
    resolve_file_inputs,
    validate_request_payload,
)

INPUT = {
    "type": "object",
    "properties": {
        "document": {"type": "string", "x-input-source": "file"},
        "legacy_file": {"type": "string", "extensions": [".txt"]},  # upstream default source: file
        "typed_file": {"type": "string", "x-type": "file"},
        "optional_file": {"type": "string", "x-input-source": "file"},
        "title": {"type": "string", "x-input-source": "inline", "extensions": [".txt"]},
        "count": {"type": "integer", "minimum": 1},
    },
    "required": ["document", "legacy_file", "typed_file", "count"],
    "additionalProperties": False,
}
PARAMETER = {
    "type": "object",
    "properties": {"mode": {"enum": ["a", "b"]}},
    "required": ["mode"],
    "additionalProperties": False,
}
SCHEMAS = {"input": INPUT, "parameter": PARAMETER, "output": {"type": "object"}}


def test_file_fields():
    assert file_fields(INPUT) == ["document", "legacy_file", "typed_file", "optional_file"]
    assert required_file_fields(INPUT) == ["document", "legacy_file", "typed_file"]


def test_required_file_fields_are_not_demanded_at_creation():
    validate_request_payload(SCHEMAS, {"count": 2}, {"mode": "a"})


def test_every_error_is_reported_at_once():
    with pytest.raises(ApplicationError) as info:
        validate_request_payload(SCHEMAS, {"count": 0, "title": 5, "junk": True}, {"mode": "c", "other": 1})
    error = info.value
    assert error.code == "INPUT_VALIDATION_FAILED"
    errors = error.extra["errors"]
    assert len(errors) == 5, errors
    joined = "\n".join(errors)
    for needle in ("input.count", "input.title", "junk", "parameter.mode", "other"):
        assert needle in joined, needle


def test_missing_required_inline_value():
    with pytest.raises(ApplicationError) as info:
        validate_request_payload(SCHEMAS, {}, {"mode": "a"})
    assert any("count" in e for e in info.value.extra["errors"])


@pytest.mark.parametrize("value", [[], "x", None, 3])
def test_input_must_be_an_object(value):
    with pytest.raises(ApplicationError):
        validate_request_payload(SCHEMAS, value, {"mode": "a"})


def test_validation_does_not_mutate_the_skill_schema():
    before = repr(INPUT)
    validate_request_payload(SCHEMAS, {"count": 1}, {"mode": "b"})
    assert repr(INPUT) == before


def test_files_resolve_by_field_name(tmp_path):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (uploads / "document").write_text("x")
    (uploads / "legacy_file").write_text("x")
    resolved = resolve_file_inputs(INPUT, {}, uploads)
    assert resolved == {
        "document": (uploads / "document").resolve(),
        "legacy_file": (uploads / "legacy_file").resolve(),
    }
    assert all(path.is_absolute() for path in resolved.values())
    assert missing_required_files(INPUT, {}, uploads) == ["typed_file"]


def test_files_resolve_by_relative_path_in_input(tmp_path):
    uploads = tmp_path / "uploads"
    (uploads / "docs").mkdir(parents=True)
    (uploads / "docs" / "a.txt").write_text("x")
    resolved = resolve_file_inputs(INPUT, {"document": "docs/a.txt"}, uploads)
    assert resolved["document"] == (uploads / "docs" / "a.txt").resolve()


@pytest.mark.parametrize("given", ["../secret.txt", "/etc/passwd", "docs/../../secret.txt"])
def test_file_paths_never_leave_uploads(tmp_path, given):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    assert "document" not in resolve_file_inputs(INPUT, {"document": given}, uploads)
    assert "document" in missing_required_files(INPUT, {"document": given}, uploads)
