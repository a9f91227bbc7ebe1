"""Turn prompts (R-EN6): the first turn names the skill and its inputs, later turns are the reply."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# A lone UTF-16 surrogate (valid in a JSON string, e.g. "\ud800") cannot be encoded for a
# command line, a pipe or a log file; it becomes U+FFFD like any other undecodable text.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _listing(values: Mapping[str, Any], files: Mapping[str, Path] | None = None) -> list[str]:
    lines = [f"- `{name}`: {_compact(value)}" for name, value in values.items()]
    lines += [f"- `{name}` (file): {Path(path).resolve()}" for name, path in (files or {}).items()]
    return lines or ["(none)"]


def first_turn_prompt(
    skill_id: str,
    skill_name: str,
    inputs: Mapping[str, Any],
    parameters: Mapping[str, Any],
    file_inputs: Mapping[str, Path],
    run_dir: Path,
    *,
    skill_dir: Path | None = None,
) -> str:
    """The prompt of attempt 1.

    ``skill_dir`` is where the engine finds the run-local skill copy
    (``adapter.skill_dir(run_dir, skill_id)``); without it the prompt only names the skill.
    File inputs are listed by absolute path, other values as compact JSON.
    """
    run_dir = Path(run_dir).resolve()
    title = f"`{skill_id}` ({skill_name})" if skill_name and skill_name != skill_id else f"`{skill_id}`"
    lines = [f"Run the skill {title} on the inputs below."]
    if skill_dir is not None:
        lines.append(
            f"Its instructions are in {Path(skill_dir).resolve() / 'SKILL.md'}: read that file first and follow it."
        )
    lines += [
        "",
        "Inputs:",
        *_listing(inputs, file_inputs),
        "",
        "Parameters:",
        *_listing(parameters),
        "",
        f"Run directory (your working directory): {run_dir}",
        f"Artifacts directory (output files go here): {run_dir / 'artifacts'}",
    ]
    return _encodable("\n".join(lines) + "\n")


def reply_prompt(response: Any) -> str:
    """A resumed turn's prompt is the user's reply itself; non-strings become compact JSON."""
    return _encodable(response if isinstance(response, str) else _compact(response))
