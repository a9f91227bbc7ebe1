"""The engine-neutral contract between the orchestrator and the engine adapters (R-TP1).

Nothing here knows about Django, HTTP or the task queue: the orchestrator hands an adapter a
``TurnRequest`` and gets back a ``TurnResult``; everything engine-specific stays inside the adapter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from .relay import RelayLedger

ExecutionMode = Literal["auto", "interactive"]
Outcome = Literal["final", "ask_user", "error"]
RepairLevel = Literal["none", "deterministic_generic"]
InteractiveProfileKind = Literal["resumable", "sticky_process"]

DONE_MARKER = "__SKILL_DONE__"

# Stable failure reasons an adapter may report; the orchestrator maps them to run error codes.
FAILURE_TIMEOUT = "TIMEOUT"
FAILURE_ABORTED = "ABORTED"
FAILURE_ENGINE = "ENGINE_FAILED"
FAILURE_SPAWN = "ENGINE_SPAWN_FAILED"
FAILURE_PROCESS_LOST = "PROCESS_LOST"  # a sticky_process session whose process is gone
FAILURE_SANDBOX_UNAVAILABLE = "SANDBOX_UNAVAILABLE"  # bwrap missing or broken (R-SB6)
FAILURE_SANDBOX_LIMIT = "SANDBOX_LIMIT_EXCEEDED"  # a per-turn resource limit was hit (R-SB4)
FAILURE_BUDGET = "BUDGET_EXCEEDED"  # the run's or its user's token budget is spent (R-SB9)

SandboxMode = Literal["bwrap", "off"]
NetworkMode = Literal["open", "provider"]


@dataclass(frozen=True)
class SandboxSettings:
    """Operator settings of the agent sandbox (SPEC §11); every limit is per turn."""

    mode: SandboxMode = "bwrap"
    network: NetworkMode = "open"
    memory_mb: int = 4096  # per process (RLIMIT_DATA) and, polled, for all processes together
    max_processes: int = 512  # processes + threads (RLIMIT_NPROC)
    max_file_mb: int = 1024  # largest file written (RLIMIT_FSIZE)
    max_open_files: int = 4096  # per process (RLIMIT_NOFILE)
    run_dir_mb: int = 2048  # the run directory's total size, checked when the turn ends
    tmp_mb: int = 512  # the private /tmp (a tmpfs, i.e. memory)


@dataclass(frozen=True)
class EngineConfig:
    """Operator configuration of one engine, resolved from settings by the caller."""

    binary: str
    home: Path
    base_url: str | None = None
    api_key: str | None = None
    default_model: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    kill_grace_seconds: float = 5.0  # SIGTERM → SIGKILL delay when a turn is killed (R-LC12)
    # The skill's own engine defaults (R-SK9), already stripped of operator-only keys; they sit
    # beneath everything above in the engine's config files.
    skill_settings: dict[str, Any] = field(default_factory=dict)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    # Where the processes of one installation share probe answers (`--version`, `exec --help`),
    # so a freshly forked worker does not spawn the CLI again before its first turn. Never a
    # folder an agent can write to: a planted answer would become part of every command line.
    probe_dir: Path | None = None


@dataclass(frozen=True)
class ArtifactSpec:
    """A declared output file: a fixed name under artifacts/ (`filename`), or a file of the agent's
    choosing whose path it returns in output field `output_property` (R-OU1)."""

    role: str
    filename: str | None
    required: bool = True
    output_property: str | None = None


@dataclass(frozen=True)
class SkillMaterial:
    """The skill snapshot a run works on, and what the run-local copy must be patched with."""

    skill_id: str
    source_dir: Path
    artifacts: tuple[ArtifactSpec, ...] = ()


@dataclass(frozen=True)
class TurnRequest:
    run_dir: Path
    prompt: str
    mode: ExecutionMode
    skill: SkillMaterial
    hard_timeout_seconds: float
    model: str | None = None
    session_handle: str | None = None  # set on resume turns
    # Host folders the turn may read but not write (a skill's dependency environment, R-SK7), and
    # folders put first on PATH, in order.
    readonly_paths: tuple[Path, ...] = ()
    path_prefix: tuple[Path, ...] = ()
    # The run's spend limits and what its relay counts and refuses (R-SB8, R-SB9); one ledger
    # for all the turns of one engine process. None: no limits, refusals seen by nobody.
    relay_ledger: RelayLedger | None = field(default=None, compare=False)

    @property
    def is_resume(self) -> bool:
        return bool(self.session_handle)


class TurnControl(Protocol):
    """Hooks the orchestrator gives a running turn; all are called from the turn's thread."""

    def on_spawn(self, pid: int) -> None: ...

    def should_abort(self) -> bool:
        """Polled while the engine runs; True kills the process group (cancel, lost claim)."""
        ...

    def on_output(self, stream: str, chunk: bytes) -> None:
        """Raw engine output as it arrives (``stream`` is "stdout" or "stderr"), complete, on a
        reader thread; the TurnResult keeps only a capped copy (R-AC2)."""
        ...

    def on_activity(self, item: dict[str, Any]) -> None:
        """One activity item (engines/activity.py) read from the output while the turn runs.

        Called on the process's output reader thread: it must return quickly (R-AC1).
        """
        ...


@dataclass
class Interaction:
    interaction_id: int
    prompt: str
    kind: str = "open_text"
    options: list[Any] = field(default_factory=list)
    required_fields: list[Any] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    ui_hints: dict[str, Any] = field(default_factory=dict)
    default_decision_policy: str = "engine_judgement"

    def as_dict(self) -> dict[str, Any]:
        return {
            "interaction_id": self.interaction_id,
            "kind": self.kind,
            "prompt": self.prompt,
            "options": self.options,
            "ui_hints": self.ui_hints,
            "default_decision_policy": self.default_decision_policy,
            "required_fields": self.required_fields,
            "context": self.context,
        }


@dataclass
class TurnResult:
    """What one engine turn amounted to, with no engine-specific shape left in it."""

    outcome: Outcome
    final_data: dict[str, Any] | None = None
    interaction: Interaction | None = None
    ask_user_invalid: bool = False  # an envelope was present but unusable (R-TP5)
    done_marker_found: bool = False
    assistant_text: str = ""
    session_handle: str | None = None
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    repair_level: RepairLevel = "none"
    failure_reason: str | None = None
    failure_message: str = ""
    failure_details: dict[str, Any] = field(default_factory=dict)  # e.g. a budget's used and limit
    warnings: list[dict[str, str]] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    # Token counts and cost as the engine reported them (engines.activity.usage_report), or None.
    usage: dict[str, Any] | None = None


class ResidentSession(Protocol):
    """A resident engine process that keeps its conversation between turns (sticky_process)."""

    def send(self, prompt: str, control: TurnControl, hard_timeout_seconds: float) -> TurnResult: ...

    def is_alive(self) -> bool: ...

    def close(self) -> None: ...


def json_object(text: str | bytes) -> dict[str, Any] | None:
    """``text`` parsed as one JSON object; None for anything else (noise, a cut-off line, a list)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
