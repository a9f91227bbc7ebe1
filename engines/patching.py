"""Mode-aware runtime patches appended to a run's own copy of SKILL.md (R-PA1..R-PA5).

Two parts, always in this order: ``artifact_patch`` (identical in both modes, the only place the
artifacts path appears) then ``mode_patch``. Each part opens with its own marker comment, and a
part whose marker is already in the file is not appended again, so patching twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .protocol import FIELD_TYPES
from .types import DONE_MARKER, ArtifactSpec, ExecutionMode

ARTIFACT_MARKER = "<!-- skill-runner:artifact-patch -->"
MODE_MARKER = "<!-- skill-runner:mode-patch -->"


def artifact_patch(run_dir: Path, artifacts: Iterable[ArtifactSpec]) -> str:
    """Redirect every output file of the skill to ``<run_dir>/artifacts/`` (R-PA2)."""
    target = Path(run_dir).resolve() / "artifacts"
    lines = [
        ARTIFACT_MARKER,
        "## Runtime override: where output files go",
        "",
        f"Write every output file of this skill into the directory `{target}/` and refer to",
        "such files by their absolute path there. This overrides every other output location in",
        'this document ("the current directory", `{{ run_dir }}`, any other folder): intermediate',
        "scratch files may go elsewhere, deliverables go only there.",
        "",
    ]
    specs = list(artifacts)
    if specs:
        lines.append("Expected output files in that directory:")
        for spec in specs:
            need = "required" if spec.required else "optional"
            if spec.filename:
                lines.append(f"- `{target}/{spec.filename}` (role `{spec.role}`, {need})")
            else:  # by value (R-OU1): the agent names the file, its path goes in the output field
                lines.append(
                    f"- a file of your choosing for output field `{spec.output_property}` (role `{spec.role}`,"
                    f" {need}); put its path in that field"
                )
    else:
        lines.append("This skill names no fixed output files; any file it produces still goes there.")
    return "\n".join(lines) + "\n"


_AUTO = f"""{MODE_MARKER}
## Runtime execution mode: automatic

No person is available during this run and nobody will read questions. Never ask the user
anything and never stop to wait for an answer. Whenever a choice is needed, decide by yourself:
use the defaults the skill gives, otherwise your best judgement, and carry on until the whole
task is finished. End with the result as one JSON object following the skill's output format.
"""

# Every type protocol.parse_interaction accepts, so the agent is told of no more and no fewer.
_FIELD_TYPE_NAMES = ", ".join(f"`{name}`" for name in FIELD_TYPES)

_INTERACTIVE = f"""{MODE_MARKER}
## Runtime execution mode: interactive

A person takes part in this run. You may ask the user whenever the skill calls for their input
or a decision you cannot make well on your own. Ask one question at a time, then end your turn:
the user's answer arrives as text in the next message.

Preferred (optional) way to ask: end the message with one JSON object `{{"ask_user": {{...}}}}`
holding `interaction_id` (a positive integer, one higher for each new question), `kind`, `prompt`
(the question itself, in the user's language) and what the kind needs. One example per kind:

```json
{{"ask_user": {{"interaction_id": 1, "kind": "open_text", "prompt": "What should the summary focus on?"}}}}
{{"ask_user": {{"interaction_id": 2, "kind": "choose_one", "prompt": "Which tone should the text use?", "options": ["formal", "casual"], "allow_free_text": true}}}}
{{"ask_user": {{"interaction_id": 3, "kind": "confirm", "prompt": "Shall I translate the abstract too?"}}}}
{{"ask_user": {{"interaction_id": 4, "kind": "fill_fields", "prompt": "Details for the citation:", "fields": [{{"name": "title", "label": "Title", "type": "text", "required": true}}, {{"name": "year", "label": "Year", "type": "integer"}}]}}}}
{{"ask_user": {{"interaction_id": 5, "kind": "upload_files", "prompt": "Please send the paper.", "files": [{{"name": "paper", "accept": ".pdf", "required": true}}]}}}}
{{"ask_user": {{"interaction_id": 6, "kind": "risk_ack", "prompt": "Overwrite the existing notes?", "risk": "The 40 notes in the folder are replaced and cannot be restored."}}}}
```

- `open_text`: a free answer;
- `choose_one`: pick one of `options` (strings, or `{{"label", "value"}}` objects); with
  `"allow_free_text": false` the user is offered only the options;
- `confirm`: yes or no; the answer arrives as `Yes` or `No`;
- `fill_fields`: a small form; each field has a `name`, a `label`, a `type`
  ({_FIELD_TYPE_NAMES}) and whether it is `required`;
  the answer arrives as one `name: value` line per field filled in;
- `upload_files`: the user sends files (`files` describes what you expect: `name`, `required`,
  optional `hint` and `accept` such as `.pdf`); the answer lists their paths in the run directory;
- `risk_ack`: an action with consequences; `risk` states them; the user acknowledges or declines.

Whatever the kind, the user may also answer in their own words.

A question asked in plain words is understood as well.

When the whole task is done, answer with the final result as one JSON object following the
skill's output format and include `"{DONE_MARKER}": true` in that object. Add this marker only
once everything is finished; leave it out of any message that is waiting for the user.
"""


def mode_patch(mode: ExecutionMode) -> str:
    """Execution semantics for ``mode`` (R-PA3, R-PA4)."""
    if mode == "auto":
        return _AUTO
    if mode == "interactive":
        return _INTERACTIVE
    raise ValueError(f"unknown execution mode {mode!r}")


def patch_skill_file(path: Path, run_dir: Path, mode: ExecutionMode, artifacts: Iterable[ArtifactSpec]) -> None:
    """Append the parts that are not in ``path`` yet, artifact part first (R-PA1, R-PA5)."""
    text = path.read_text(encoding="utf-8")
    parts = []
    if ARTIFACT_MARKER not in text:
        parts.append(artifact_patch(run_dir, artifacts))
    if MODE_MARKER not in text:
        parts.append(mode_patch(mode))
    if parts:
        separator = "" if text.endswith("\n") or not text else "\n"
        path.write_text(text + separator + "\n" + "\n".join(parts), encoding="utf-8")
