"""Validating a run's input and parameter against the skill's schemas (R-AD5), file inputs included."""

from __future__ import annotations

import copy
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from jsonschema import validators

from kernel.errors import ApplicationError


def zipped_files(members: Iterable[tuple[str, IO[bytes]]]) -> tempfile.SpooledTemporaryFile:
    """Input files as the zip a run's upload is: each open file stored under its name."""
    archive_file = tempfile.SpooledTemporaryFile(max_size=4 * 1024 * 1024)
    with zipfile.ZipFile(archive_file, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, source in members:
            with archive.open(name, "w") as member:
                shutil.copyfileobj(source, member)
    archive_file.seek(0)
    return archive_file


def file_fields(input_schema: dict[str, Any]) -> list[str]:
    """Input properties that are files uploaded with the run rather than inline values."""
    fields = []
    for name, spec in (input_schema.get("properties") or {}).items():
        if not isinstance(spec, dict):
            continue
        source = spec.get("x-input-source")
        if source == "file" or (source is None and ("extensions" in spec or spec.get("x-type") == "file")):
            fields.append(name)
    return fields


def required_file_fields(input_schema: dict[str, Any]) -> list[str]:
    required = set(input_schema.get("required") or [])
    return [name for name in file_fields(input_schema) if name in required]


def _errors(schema: dict[str, Any], value: Any, label: str) -> list[str]:
    validator = validators.validator_for(schema)(schema)
    messages = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in error.absolute_path)
        messages.append(f"{label}{'.' + path if path else ''}: {error.message}")
    return messages


def validate_request_payload(schemas: dict[str, dict[str, Any]], input_value: Any, parameter_value: Any) -> None:
    """Every schema error of both objects in one 400; file fields are checked after upload."""
    input_schema = copy.deepcopy(schemas["input"])
    files = set(required_file_fields(input_schema))
    if files:
        input_schema["required"] = [name for name in input_schema.get("required", []) if name not in files]
    errors = _errors(input_schema, input_value, "input") + _errors(schemas["parameter"], parameter_value, "parameter")
    if errors:
        raise ApplicationError("INPUT_VALIDATION_FAILED", "; ".join(errors), errors=errors)


def resolve_file_inputs(input_schema: dict[str, Any], input_value: dict[str, Any], uploads: Path) -> dict[str, Path]:
    """Each file field → its absolute path under uploads/ (named after the field, or the relative path given)."""
    resolved: dict[str, Path] = {}
    root = uploads.resolve()
    for name in file_fields(input_schema):
        given = input_value.get(name)
        candidate = (root / given).resolve() if isinstance(given, str) and given else root / name
        if candidate.is_relative_to(root) and candidate.exists():
            resolved[name] = candidate
    return resolved


def missing_required_files(input_schema: dict[str, Any], input_value: dict[str, Any], uploads: Path) -> list[str]:
    present = resolve_file_inputs(input_schema, input_value, uploads)
    return [name for name in required_file_fields(input_schema) if name not in present]
