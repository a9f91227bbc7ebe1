"""Turn prompts: the first turn names the skill and its inputs (or is the skill's own template,
R-SK8), later turns are the reply (R-EN6); a repair round lists what was wrong with the final
answer (R-RP1)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from .replies import compact_json, readable_reply
from .types import DONE_MARKER, ExecutionMode

# A lone UTF-16 surrogate (valid in a JSON string, e.g. "\ud800") cannot be encoded for a
# command line, a pipe or a log file; it becomes U+FFFD like any other undecodable text.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def _listing(values: Mapping[str, Any], files: Mapping[str, Path] | None = None) -> list[str]:
    lines = [f"- `{name}`: {compact_json(value)}" for name, value in values.items()]
    lines += [f"- `{name}` (file): {Path(path).resolve()}" for name, path in (files or {}).items()]
    return lines or ["(none)"]


class PromptTemplateError(ValueError):
    """A skill's prompt template that cannot be rendered (R-SK8): the run fails, never half-prompted."""


def prompt_template(manifest: Mapping[str, Any], engine: str) -> Any:
    """`entrypoint.prompts.<engine>`, else `entrypoint.prompts.common`, else None (R-SK8)."""
    entrypoint = manifest.get("entrypoint")
    prompts = entrypoint.get("prompts") if isinstance(entrypoint, Mapping) else None
    if not isinstance(prompts, Mapping):
        return None
    return prompts.get(engine, prompts.get("common"))


def render_prompt_template(
    template: Any, inputs: Mapping[str, Any], parameters: Mapping[str, Any], file_inputs: Mapping[str, Path]
) -> str:
    """The skill author's first-turn body with `{{ input.x }}` / `{{ parameter.x }}` filled in.

    Rendered in Jinja's sandbox (no attribute tricks reach Python internals) with strict
    undefined, so a missing value is an error rather than a silently empty gap. File inputs are
    given as absolute paths.
    """
    if not isinstance(template, str):
        raise PromptTemplateError("the skill's prompt template (entrypoint.prompts) must be a string")
    context = {
        "input": {**inputs, **{name: str(Path(path).resolve()) for name, path in file_inputs.items()}},
        "parameter": dict(parameters),
    }
    environment = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    try:
        return environment.from_string(template).render(context)
    except TemplateError as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, TemplateSyntaxError) else ""
        raise PromptTemplateError(f"the skill's prompt template cannot be rendered{where}: {exc.message}") from exc
    except Exception as exc:  # the template's own expressions may fail any way (1/0, "a" + 1)
        raise PromptTemplateError(
            f"the skill's prompt template cannot be rendered: {type(exc).__name__}: {exc}"
        ) from exc


def first_turn_prompt(
    skill_id: str,
    skill_name: str,
    inputs: Mapping[str, Any],
    parameters: Mapping[str, Any],
    file_inputs: Mapping[str, Path],
    run_dir: Path,
    *,
    skill_dir: Path | None = None,
    body: str | None = None,
) -> str:
    """The prompt of attempt 1.

    ``skill_dir`` is where the engine finds the run-local skill copy
    (``adapter.skill_dir(run_dir, skill_id)``); without it the prompt only names the skill.
    File inputs are listed by absolute path, other values as compact JSON. ``body`` (a rendered
    skill prompt template, R-SK8) replaces the generic opening and listing; the pointer to the
    patched SKILL.md and the run directory still follow it, so the mode patches apply.
    """
    run_dir = Path(run_dir).resolve()
    title = f"`{skill_id}` ({skill_name})" if skill_name and skill_name != skill_id else f"`{skill_id}`"
    if body is None:
        lines = [f"Run the skill {title} on the inputs below."]
        if skill_dir is not None:
            lines.append(
                f"Its instructions are in {Path(skill_dir).resolve() / 'SKILL.md'}: read that file first and follow it."
            )
        lines += ["", "Inputs:", *_listing(inputs, file_inputs), "", "Parameters:", *_listing(parameters)]
    else:
        lines = [body.rstrip("\n")]
        if skill_dir is not None:
            lines += [
                "",
                f"The instructions of the skill {title}, with the rules of this run, are in "
                f"{Path(skill_dir).resolve() / 'SKILL.md'}: read that file first and follow it.",
            ]
    lines += [
        "",
        f"Run directory (your working directory): {run_dir}",
        f"Artifacts directory (output files go here): {run_dir / 'artifacts'}",
    ]
    return _encodable("\n".join(lines) + "\n")


REPLY_FILES_HEADING = "Files attached to this reply (in the run directory):"


def reply_prompt(response: Any, files: Sequence[str] = (), field_order: Sequence[str] = ()) -> str:
    """A resumed turn's prompt is the user's reply itself, as text (`readable_reply`: a structured
    reply in words). Files sent with the reply (R-UP6) follow it, one run-relative path a line."""
    text = readable_reply(response, field_order)
    if files:
        listing = "\n".join([REPLY_FILES_HEADING, *(f"- {path}" for path in files)])
        text = f"{text}\n\n{listing}" if text else listing
    return _encodable(text)


# A repair prompt restates the output contract; a schema bigger than this is named, not repeated.
_REPAIR_SCHEMA_CHARS = 8000
REPAIR_PROBLEMS_LISTED = 20


def _problem_line(problem: Mapping[str, str]) -> str:
    where = f"`{problem['pointer']}`" if problem.get("pointer") else "the answer as a whole"
    return f"- at {where}: expected {problem['expected']}; got {problem['got']}"


def repair_prompt(
    *,
    problems: Sequence[Mapping[str, str]],
    output_schema: Mapping[str, Any],
    run_dir: Path,
    mode: ExecutionMode,
    round_number: int,
    max_rounds: int,
) -> str:
    """The prompt of a repair round (R-RP1): what was wrong with the final answer, where (JSON
    pointer), what was expected and what came, then the output contract again.

    ``problems`` are ``{"pointer", "expected", "got"}`` mappings; the pointer is empty when the
    answer as a whole is at fault (no JSON object at all).
    """
    artifacts_dir = Path(run_dir).resolve() / "artifacts"
    lines = [
        f"Your final answer does not meet the skill's output contract (repair round {round_number} of {max_rounds}).",
        "",
        "Problems found:",
        *(_problem_line(problem) for problem in problems[:REPAIR_PROBLEMS_LISTED]),
    ]
    if len(problems) > REPAIR_PROBLEMS_LISTED:
        lines.append(f"- … and {len(problems) - REPAIR_PROBLEMS_LISTED} more")
    lines += [
        "",
        "Fix every problem above. Produce any missing output file in the artifacts directory, then answer",
        "again with the complete result (every field, not only the corrected ones) as one JSON object",
        "and nothing else.",
        "",
        "The output contract:",
    ]
    schema = json.dumps(output_schema, ensure_ascii=False)
    if len(schema) <= _REPAIR_SCHEMA_CHARS:
        lines += ["- the result object must validate against this JSON Schema:", "```json", schema, "```"]
    else:
        lines.append("- the result object must validate against the output schema the skill describes in SKILL.md")
    lines.append(f"- output files go into {artifacts_dir}; a field naming a file holds that file's path")
    if mode == "interactive":
        lines.append(f'- the task is done, so include `"{DONE_MARKER}": true` in the object')
    return _encodable("\n".join(lines) + "\n")
