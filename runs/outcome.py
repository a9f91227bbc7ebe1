"""What a finished engine turn means for the run: the completion gates of R-LC1 and R-LC2.

Pure functions over the engine-neutral TurnResult, the skill's output schema and the run
directory, which they read but never change: a declared artifact the output points at is
returned as a move for the caller (runs.turn_end) to make; the state change itself is made by
runs.services.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import ValidationError, validators

from engines.prompt import REPAIR_PROBLEMS_LISTED
from engines.types import (
    FAILURE_BUDGET,
    FAILURE_SANDBOX_LIMIT,
    FAILURE_SANDBOX_UNAVAILABLE,
    FAILURE_SPAWN,
    FAILURE_TIMEOUT,
    TurnResult,
)

from . import runfiles
from .artifacts import collect_artifacts

PLACEHOLDER_PROMPT = "The agent is waiting for your reply. Please answer to continue."


def result_envelope(
    run_status: str,
    *,
    data: Any = None,
    artifacts: list[str] | None = None,
    repair_level: str = "none",
    warnings: list[dict[str, str]] | None = None,
    error: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The R-OU2 envelope a terminal run carries; only a succeeded run carries data."""
    return {
        "status": {"succeeded": "success", "canceled": "canceled"}.get(run_status, "failed"),
        "data": data if run_status == "succeeded" else None,
        "artifacts": artifacts or [],
        "repair_level": repair_level,
        "validation_warnings": warnings if warnings is not None else [],
        "error": error,
    }


@dataclass
class TurnDecision:
    status: str  # succeeded | failed | waiting_user | repairing
    data: dict[str, Any] | None = None
    artifacts: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None
    warnings: list[dict[str, str]] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    repair_level: str = "none"
    # Why the answer is invalid, field by field (failed decisions on OUTPUT_* / ARTIFACT_MISSING).
    problems: list[dict[str, str]] = field(default_factory=list)
    repair_prompt: str = ""  # the next prompt when the decision is a repair round (runs.repair)

    def result_envelope(self) -> dict[str, Any]:
        """The R-OU2 envelope for a terminal decision."""
        return result_envelope(
            self.status,
            data=self.data,
            artifacts=self.artifacts,
            repair_level=self.repair_level,
            warnings=self.warnings,
            error=self.error,
        )


def _error(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def engine_failure(turn: TurnResult) -> dict[str, str] | None:
    """Step 1 of both gates: the engine itself failed."""
    if turn.failure_reason == FAILURE_TIMEOUT:
        return _error("TIMEOUT", "the engine turn exceeded its hard timeout and was killed")
    if turn.failure_reason == FAILURE_SPAWN:
        return _error("ENGINE_SPAWN_FAILED", turn.failure_message or "the engine could not be started")
    if turn.failure_reason in (FAILURE_SANDBOX_UNAVAILABLE, FAILURE_SANDBOX_LIMIT):
        return _error(turn.failure_reason, turn.failure_message)
    if turn.failure_reason == FAILURE_BUDGET:  # R-SB9: which budget, how much was used of it
        return {**_error(FAILURE_BUDGET, turn.failure_message), **turn.failure_details}
    if turn.outcome == "error" or (turn.exit_code not in (0, None)):
        detail = turn.failure_message or f"exit code {turn.exit_code}"
        return _error("ENGINE_FAILED", f"the engine failed: {detail}")
    return None


def list_artifacts(run_dir: Path) -> list[str]:
    """The produced files under artifacts/; links and special files are none of them (R-SB7)."""
    return runfiles.list_files(run_dir, "artifacts")


EXCERPT_CHARS = 120


def excerpt(value: Any) -> str:
    """A short, single-line rendering of what the agent gave, for messages and repair prompts."""
    text = " ".join(json.dumps(value, ensure_ascii=False).split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def _pointer(path: Iterable[Any]) -> str:
    """RFC 6901 JSON pointer of a path in the answer ("" is the whole answer)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _expected(error: ValidationError) -> str:
    keyword, value = error.validator, error.validator_value
    if keyword == "type":
        return "a value of type " + (" or ".join(value) if isinstance(value, list) else str(value))
    if keyword == "enum":
        return "one of " + excerpt(value)
    if keyword == "const":
        return "exactly " + excerpt(value)
    return f"{keyword} {excerpt(value)}"


def _problems_of(error: ValidationError) -> list[dict[str, str]]:
    """One schema error as repair problems: JSON pointer, what was expected, what came (R-RP1)."""
    path = list(error.absolute_path)
    instance = error.instance
    names = error.validator_value
    if error.validator == "required" and isinstance(instance, dict) and isinstance(names, list):
        return [
            {"pointer": _pointer([*path, name]), "expected": "a value (a required field)", "got": "nothing (missing)"}
            for name in names
            if name not in instance
        ]
    schema = error.schema
    if (
        error.validator == "additionalProperties"
        and error.validator_value is False
        and isinstance(instance, dict)
        and isinstance(schema, Mapping)
    ):
        known = schema.get("properties") or {}
        patterns = schema.get("patternProperties") or {}
        return [
            {
                "pointer": _pointer([*path, name]),
                "expected": "no such field (the schema does not allow it)",
                "got": excerpt(value),
            }
            for name, value in instance.items()
            if name not in known and not any(re.search(pattern, name) for pattern in patterns)
        ]
    return [{"pointer": _pointer(path), "expected": _expected(error), "got": excerpt(instance)}]


def schema_problems(data: Any, schema: dict[str, Any]) -> list[dict[str, str]]:
    """Every way ``data`` fails ``schema``, each once, in document order."""
    validator = validators.validator_for(schema)(schema)
    problems: dict[tuple[str, ...], dict[str, str]] = {}  # keyed to drop repeats, in order
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        for problem in _problems_of(error):
            problems.setdefault(tuple(problem.values()), problem)
    return list(problems.values())


@dataclass
class Validation:
    """Why an answer is not a valid result: the run error, and the problems a repair round lists."""

    error: dict[str, str]
    problems: list[dict[str, str]]


def _validate_output(
    turn: TurnResult, schema: dict[str, Any], specs: list[dict[str, Any]], run_dir: Path
) -> Validation | None:
    """Why the answer is not a valid result (None: it is)."""
    data = turn.final_data
    if data is None:
        got = excerpt(turn.assistant_text) if turn.assistant_text.strip() else "an empty message"
        return Validation(
            _error("OUTPUT_MISSING", "the agent's final message held no JSON object"),
            [{"pointer": "", "expected": "one JSON object following the output schema", "got": got}],
        )
    problems = schema_problems(data, schema)
    if problems:
        listed = "; ".join(
            f"{p['pointer'] or '(root)'}: expected {p['expected']}, got {p['got']}"
            for p in problems[:REPAIR_PROBLEMS_LISTED]
        )
        if len(problems) > REPAIR_PROBLEMS_LISTED:
            listed += f"; … and {len(problems) - REPAIR_PROBLEMS_LISTED} more"
        return Validation(
            _error("OUTPUT_SCHEMA_INVALID", "output does not match the skill's output schema: " + listed), problems
        )
    # Only checked here, nothing moved: the caller collects the files once the run succeeds (R-OU1).
    collection = collect_artifacts(data, specs, run_dir, apply=False)
    if collection.error:
        return Validation(collection.error, collection.problems)
    return None


def _finish(
    turn: TurnResult, invalid: Validation | None, run_dir: Path, warnings: list[dict[str, str]]
) -> TurnDecision:
    if invalid:
        return TurnDecision(
            "failed",
            data=turn.final_data,
            error=invalid.error,
            problems=invalid.problems,
            warnings=warnings,
            artifacts=list_artifacts(run_dir),
            repair_level=turn.repair_level,
        )
    return TurnDecision(
        "succeeded",
        data=turn.final_data,
        warnings=warnings,
        artifacts=list_artifacts(run_dir),
        repair_level=turn.repair_level,
    )


def build_pending(turn: TurnResult, attempt_number: int) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The backend-owned pending payload (R-LC3, R-LC4): always an id and a non-empty prompt."""
    warnings: list[dict[str, str]] = []
    context: dict[str, Any] = {}
    if turn.interaction is not None and not turn.ask_user_invalid:
        payload = turn.interaction.as_dict()
        if payload["interaction_id"] != attempt_number:
            context["agent_interaction_id"] = payload["interaction_id"]
        context["source"] = "ask_user_envelope"
    else:
        # An unusable envelope was already reported by engines.protocol (ASK_USER_PAYLOAD_INVALID).
        text = (turn.assistant_text or "").strip()
        payload = {
            "kind": "open_text",
            "prompt": text or PLACEHOLDER_PROMPT,
            "options": [],
            "ui_hints": {},
            "default_decision_policy": "engine_judgement",
            "required_fields": [],
            "context": {},
        }
        context["source"] = "assistant_message" if text else "placeholder"
    payload["interaction_id"] = attempt_number
    payload["context"] = {**(payload.get("context") or {}), **context}
    if not str(payload.get("prompt") or "").strip():
        payload["prompt"] = PLACEHOLDER_PROMPT
    payload.setdefault("default_decision_policy", "engine_judgement")
    payload["default_decision_policy"] = payload["default_decision_policy"] or "engine_judgement"
    return payload, warnings


def _failed(turn: TurnResult, error: dict[str, str], run_dir: Path, warnings: list[dict[str, str]]) -> TurnDecision:
    """A turn that ends the run failed before its output could count."""
    return TurnDecision(
        "failed", error=error, warnings=warnings, artifacts=list_artifacts(run_dir), repair_level=turn.repair_level
    )


def decide(
    *,
    mode: str,
    turn: TurnResult,
    output_schema: dict[str, Any],
    artifact_specs: list[dict[str, Any]],
    run_dir: Path,
    attempt_number: int,
    max_attempt: int | None,
    needs_session_handle: bool,
    repair_rounds: int = 0,
) -> TurnDecision:
    """The run's next state after `turn`. Pure: declared files are only checked; the caller
    collects them into artifacts/ when the decision is a success (runs.artifacts, R-OU1).

    ``repair_rounds``: the run's output-repair rounds so far, which are attempts that do not
    count toward ``max_attempt`` (R-RP1)."""
    warnings = list(turn.warnings)
    failure = engine_failure(turn)
    if failure:
        return _failed(turn, failure, run_dir, warnings)

    if mode == "auto":  # R-LC1: exit 0 + schema-valid output + artifacts; no marker needed
        return _finish(turn, _validate_output(turn, output_schema, artifact_specs, run_dir), run_dir, warnings)

    if turn.done_marker_found:  # R-LC2 step 2: strong evidence, never waits
        return _finish(turn, _validate_output(turn, output_schema, artifact_specs, run_dir), run_dir, warnings)

    is_question = turn.outcome == "ask_user" or turn.ask_user_invalid or turn.interaction is not None
    if not is_question and turn.final_data is not None:
        if _validate_output(turn, output_schema, artifact_specs, run_dir) is None:  # step 3: soft completion
            warnings.append(
                {
                    "code": "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER",
                    "message": "the output matched the schema but carried no __SKILL_DONE__ marker",
                }
            )
            return _finish(turn, None, run_dir, warnings)

    if max_attempt is not None and attempt_number - repair_rounds >= max_attempt:  # step 4
        error = _error(
            "INTERACTIVE_MAX_ATTEMPT_EXCEEDED",
            f"the skill allows at most {max_attempt} attempts and the task is not done",
        )
        return _failed(turn, error, run_dir, warnings)

    if needs_session_handle and not turn.session_handle:  # R-EN7
        error = _error(
            "SESSION_RESUME_FAILED", "the engine reported no session id, so the conversation could not be resumed"
        )
        return _failed(turn, error, run_dir, warnings)

    pending, pending_warnings = build_pending(turn, attempt_number)  # step 5
    return TurnDecision(
        "waiting_user",
        pending=pending,
        warnings=warnings + pending_warnings,
        repair_level=turn.repair_level,
    )
