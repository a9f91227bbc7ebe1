"""The shared engine adapter: everything a turn needs except what differs per CLI.

An adapter subclass supplies its name, profile, skill folder, automatic-execution flags, command
line, environment variables, home config files and stdout extraction; this base class does the
rest (skill copy + patch, process run, failure detection, protocol interpretation, probes).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from .activity import ActivityParser
from .patching import patch_skill_file
from .process import LineHook, ProcessResult, SpawnError, resolve_executable, run_process, run_quick
from .protocol import interpret_final_message
from .provider_api import ProviderApi
from .sandbox import Sandbox, SandboxUnavailable
from .skill_config import deep_merge
from .types import (
    FAILURE_ENGINE,
    FAILURE_SANDBOX_UNAVAILABLE,
    FAILURE_SPAWN,
    EngineConfig,
    ExecutionMode,
    InteractiveProfileKind,
    ResidentSession,
    TurnControl,
    TurnRequest,
    TurnResult,
    json_object,
)

# The only variables of the server's environment an engine inherits (R-EN5); the engine's own
# home, key and endpoint variables are added by the adapter.
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?")
_STDERR_TAIL_CHARS = 800


@dataclass
class EngineOutput:
    """What an adapter reads out of its CLI's raw output before the shared protocol layer."""

    final_message: str = ""
    session_handle: str | None = None
    error: str | None = None  # set when the CLI reported a failed turn
    usage: dict[str, Any] | None = None  # engines.activity.usage_report of the turn, when reported


T = TypeVar("T")
_probe_lock = threading.Lock()
_probe_cache: dict[tuple[str, str, int, int], Any] = {}


def _probe_file(directory: Path, key: tuple[str, str, int, int]) -> Path:
    return directory / (hashlib.sha256(json.dumps(key).encode()).hexdigest() + ".json")


def _stored_probe(directory: Path | None, key: tuple[str, str, int, int]) -> tuple[Any] | None:
    """(answer,) as another process stored it for ``key``, or None."""
    if directory is None:
        return None
    try:
        stored = json.loads(_probe_file(directory, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (stored["answer"],) if isinstance(stored, dict) and stored.get("key") == list(key) else None


def _store_probe(directory: Path | None, key: tuple[str, str, int, int], answer: Any) -> None:
    if directory is None:
        return
    target = _probe_file(directory, key)
    staging = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging.write_text(json.dumps({"key": key, "answer": answer}), encoding="utf-8")
        os.replace(staging, target)  # readers see the whole answer or none
    except OSError:
        staging.unlink(missing_ok=True)  # only a cache: the next process asks the CLI itself


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL stream, skipping noise lines and cut-off lines."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        event = json_object(line) if line.startswith("{") else None
        if event is not None:
            events.append(event)
    return events


def without_links(root: Path, path: Path) -> Path:
    """``path`` (under ``root``) with every symlink on its way from ``root`` removed.

    Engine homes belong to the agent, which may leave links there; the service (often root)
    prepares them before each turn and must never write through one (R-SB7). No agent process
    runs meanwhile: the previous turn's sandbox is gone.
    """
    current = Path(root)
    for part in Path(path).relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            current.unlink()
    return path


def write_json_settings(path: Path, operator: dict[str, Any], config: EngineConfig) -> None:
    """A JSON settings file in the engine home: the skill's defaults beneath the operator's (R-SK9)."""
    settings = deep_merge(config.skill_settings, operator)
    write_if_changed(path, json.dumps(settings, indent=2) + "\n", Path(config.home))


def missing_event(engine: str, event: str, stderr: str) -> str:
    """The error of a turn whose CLI never printed the event that ends a turn, with its stderr's tail."""
    tail = stderr.strip()[-_STDERR_TAIL_CHARS:]
    return f"{engine} printed no {event} event" + (f": {tail}" if tail else "")


def write_if_changed(path: Path, content: str, root: Path) -> None:
    """Write atomically, and only when different: homes are shared by concurrent runs.

    An engine home (``root``) is writable by the agent (R-SB7): links on the way to ``path`` are
    removed, the staging file is a fresh one (created exclusively, so never a link planted at
    its name) and the rename replaces a link at `path` instead of writing through it.
    """
    without_links(root, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_symlink() and path.exists() and path.read_text(encoding="utf-8") == content:
        return
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def _linked_below(root: Path, path: Path) -> bool:
    """Whether a component of `path` (lexically under `root`) below `root` is a link.

    Checked between turns, when no agent process of the run is left to swap it.
    """
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return True
    return False


def argv_prompt(prompt: str) -> str:
    """A prompt that a CLI's option parser cannot mistake for a flag (a reply like "-5 °C")."""
    return " " + prompt if prompt.startswith("-") else prompt


class EngineAdapter(ABC):
    """Base of every engine adapter; one instance serves all runs of its engine (stateless).

    A concrete subclass in a module of this package is an engine: engines.registry finds it.
    """

    name: ClassVar[str]
    interactive_profile: ClassVar[InteractiveProfileKind] = "resumable"
    skill_root: ClassVar[str]  # folder under the run dir where the CLI discovers skills
    # Files and folders configuring this CLI that no skill package or upload may bring (R-SK2);
    # the skill root is always one of them.
    extra_control_names: ClassVar[tuple[str, ...]] = ()
    # Where the engine appears in engine lists (the default effective engines, GET /v1/engines).
    listing_order: ClassVar[int] = 100
    model_flag: ClassVar[str] = "-m"
    # The file of a skill package holding its defaults for this CLI when runner.json names none (R-SK9).
    skill_defaults_file: ClassVar[str | None] = None
    known_models: ClassVar[tuple[str, ...]] = ()
    provider_id: ClassVar[str] = ""  # whose models these are, as upstream's clients name them
    # The reasoning efforts a run may ask for (R-UP4), each carried by effort_settings.
    efforts: ClassVar[tuple[str, ...]] = ()
    # Where the CLI talks to when no base URL is configured: the one host the relay reaches (R-SB5).
    default_provider_url: ClassVar[str | None] = None
    # The model API the CLI speaks: what the relay lets through, where it puts the key, how it
    # counts the tokens (R-SB8, R-SB9).
    provider_api: ClassVar[ProviderApi]

    @classmethod
    def control_names(cls) -> tuple[str, ...]:
        return (cls.skill_root, *cls.extra_control_names)

    # ---- what each engine provides -------------------------------------------------------

    @abstractmethod
    def auto_flags(self, config: EngineConfig) -> list[str]:
        """The automatic-execution flags, the same in both modes and on resume turns (§7)."""

    @abstractmethod
    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        """The argv of one turn (first or resume), exactly as in SPEC §7."""

    @abstractmethod
    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        """The engine's own variables: home/config dir, API key, base URL (R-EN8)."""

    @abstractmethod
    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        """Final agent message, session handle, reported failure and usage from raw CLI output."""

    @abstractmethod
    def activity_parser(self) -> ActivityParser:
        """A fresh incremental parser of this CLI's stdout, one per turn (R-AC1)."""

    def prepare_home(self, config: EngineConfig) -> None:
        """Create the engine's isolated home; subclasses add their config files. Idempotent."""
        for folder in (self.home_dir(config), self.tmp_dir(config)):
            without_links(Path(config.home), folder).mkdir(parents=True, exist_ok=True)

    # ---- shared machinery ------------------------------------------------------------------

    def home_dir(self, config: EngineConfig) -> Path:
        """HOME of the engine process: inside its config dir, never the server user's (R-EN5)."""
        return Path(config.home) / "home"

    def tmp_dir(self, config: EngineConfig) -> Path:
        """TMPDIR of the engine process: CLIs drop error reports and helper binaries there."""
        return Path(config.home) / "tmp"

    def line_reader(self, control: TurnControl) -> LineHook:
        """Feeds each stdout line to a fresh activity parser and its items to ``control``."""
        parser = self.activity_parser()

        def read(line: bytes) -> None:
            for item in parser.feed(line.decode("utf-8", errors="replace")):
                control.on_activity(item)

        return read

    def skill_model(self, settings: dict[str, Any]) -> str | None:
        """The model a skill's own engine config names (R-SK9); engines keep it under different keys."""
        model = settings.get("model")
        return model if isinstance(model, str) and model else None

    def default_model(self, config: EngineConfig) -> str | None:
        """Without a model of the run's own: the skill's, else the operator's (R-SK9)."""
        return self.skill_model(config.skill_settings) or config.default_model

    def stdin_prompt(self, request: TurnRequest) -> str | None:
        """The prompt as the CLI's stdin, for a CLI that alters a prompt given as an argument;
        None (the default) keeps stdin closed and the prompt in the command line."""
        return None

    def model_args(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        model = request.model or self.default_model(config)
        return [self.model_flag, model] if model else []

    def environment(self, config: EngineConfig, request: TurnRequest | None = None) -> dict[str, str]:
        """Allow-listed server variables, then operator extras, then the enforced engine ones; the
        request's PATH entries (a skill's dependency environment, R-SK7) go first."""
        env = {key: os.environ[key] for key in PASSTHROUGH_ENV if key in os.environ}
        env.setdefault("PATH", os.defpath)
        env.setdefault("LANG", "C.UTF-8")
        env.update(config.extra_env)
        if request is not None and request.path_prefix:
            env["PATH"] = os.pathsep.join([*(str(p) for p in request.path_prefix), env["PATH"]])
        env["HOME"] = str(self.home_dir(config))
        env["TMPDIR"] = str(self.tmp_dir(config))
        env["NO_COLOR"] = "1"  # plain output is what the parsers read
        env.update(self.engine_env(config))
        return env

    def skill_dir(self, run_dir: Path, skill_id: str) -> Path:
        """Where the run-local skill copy lives, i.e. where the engine discovers it (R-EN5)."""
        return Path(run_dir).resolve() / self.skill_root / "skills" / skill_id

    def materialize_skill(self, request: TurnRequest) -> Path:
        """Copy the skill snapshot into the run once, patched before it appears; create ``artifacts/``.

        Safe to call on every turn: an existing copy is left alone. The agent owns the run
        directory and may have replaced any of it with links, so nothing here writes through one
        (R-SB7): no later write into the copy, and no copy into a folder reached by a link.
        """
        run_dir = Path(request.run_dir).resolve()
        target = self.skill_dir(run_dir, request.skill.skill_id)
        if not _linked_below(run_dir, run_dir / "artifacts"):
            (run_dir / "artifacts").mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink() or _linked_below(run_dir, target):
            return target
        staging = target.with_name(f".{target.name}.staging")
        shutil.rmtree(staging, ignore_errors=True)  # left over by a crashed earlier attempt
        shutil.copytree(request.skill.source_dir, staging)
        patch_skill_file(staging / "SKILL.md", run_dir, request.mode, request.skill.artifacts)
        staging.rename(target)
        return target

    def parse(self, stdout: str, stderr: str, exit_code: int | None, mode: ExecutionMode) -> TurnResult:
        """Engine-specific extraction, engine failure detection, then the shared protocol layer.

        ``exit_code`` None means the process is still alive (a sticky session between turns).
        """
        output = self.extract(stdout, stderr)
        result = TurnResult(
            outcome="error",
            assistant_text=output.final_message,
            session_handle=output.session_handle,
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            usage=output.usage,
        )
        if output.error is not None or exit_code not in (0, None):
            result.failure_reason = FAILURE_ENGINE
            result.failure_message = self._failure_message(output, stderr, exit_code)
            return result
        reading = interpret_final_message(output.final_message, mode)
        result.outcome = reading.outcome
        result.assistant_text = reading.assistant_text
        result.final_data = reading.final_data
        result.interaction = reading.interaction
        result.ask_user_invalid = reading.ask_user_invalid
        result.done_marker_found = reading.done_marker_found
        result.repair_level = reading.repair_level
        result.warnings = reading.warnings
        return result

    def _failure_message(self, output: EngineOutput, stderr: str, exit_code: int | None) -> str:
        message = output.error or f"{self.name} exited with code {exit_code}"
        if output.error is None and stderr.strip():
            message += ": " + stderr.strip()[-_STDERR_TAIL_CHARS:]
        return message

    def turn_result(self, proc: ProcessResult, mode: ExecutionMode, argv: list[str]) -> TurnResult:
        """A TurnResult from a finished (or killed, or never started) process."""
        if proc.failure_reason is None:
            result = self.parse(proc.stdout, proc.stderr, proc.exit_code, mode)
        else:
            # Timeout, abort or spawn failure: the turn failed whatever the output says, but the
            # session handle and the last message are still worth keeping.
            output = self.extract(proc.stdout, proc.stderr)
            result = TurnResult(
                outcome="error",
                assistant_text=output.final_message,
                session_handle=output.session_handle,
                stdout=proc.stdout,
                stderr=proc.stderr,
                exit_code=proc.exit_code,
                failure_reason=proc.failure_reason,
                failure_message=proc.message,
                failure_details=proc.details,
                usage=output.usage,
            )
        result.command = list(argv)
        return result

    def prepare_turn(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        """Everything before the spawn: skill copy, engine home, command line."""
        self.materialize_skill(request)
        self.prepare_home(config)
        return self.command(request, config)

    def spawn_failure(self, message: str, argv: list[str] | None = None) -> TurnResult:
        return TurnResult(
            outcome="error", failure_reason=FAILURE_SPAWN, failure_message=message, command=list(argv or [])
        )

    def open_sandbox(self, request: TurnRequest, config: EngineConfig) -> tuple[Sandbox | None, EngineConfig]:
        """The turn's sandbox (None when switched off) and the engine config as seen inside it:
        the endpoint is the sandbox's provider relay and the key a placeholder (R-SB8).

        Raises SandboxUnavailable (R-SB6).
        """
        sandbox = Sandbox.open(request, config, self.default_provider_url, self.provider_api)
        return sandbox, (sandbox.engine_config if sandbox else config)

    def sandbox_failure(self, exc: SandboxUnavailable) -> TurnResult:
        return TurnResult(outcome="error", failure_reason=FAILURE_SANDBOX_UNAVAILABLE, failure_message=str(exc))

    def run_turn(self, request: TurnRequest, config: EngineConfig, control: TurnControl) -> TurnResult:
        """One engine turn in a fresh, sandboxed process; never raises for engine or workspace trouble."""
        try:
            sandbox, config = self.open_sandbox(request, config)
        except SandboxUnavailable as exc:
            return self.sandbox_failure(exc)
        try:
            try:
                argv = self.prepare_turn(request, config)
            except OSError as exc:
                return self.spawn_failure(f"could not prepare the run directory for {self.name}: {exc}")
            proc = run_process(
                argv,
                cwd=Path(request.run_dir),
                env=self.environment(config, request),
                control=control,
                hard_timeout=request.hard_timeout_seconds,
                grace=config.kill_grace_seconds,
                on_line=self.line_reader(control),
                sandbox=sandbox,
                stdin_text=self.stdin_prompt(request),
            )
            return self.turn_result(proc, request.mode, argv)
        finally:
            if sandbox is not None:
                sandbox.close()

    def open_resident_session(
        self, request: TurnRequest, config: EngineConfig, control: TurnControl
    ) -> ResidentSession:
        """Start the resident process of a sticky_process engine (sends no prompt yet)."""
        raise NotImplementedError(f"{self.name} is {self.interactive_profile}: it has no resident session")

    def probe(self, config: EngineConfig, purpose: str, run: Callable[[str, dict[str, str], Path], T]) -> T | None:
        """Run ``run(binary_path, env, cwd)`` once per binary file (path + mtime + size) in this
        process, and once per installation when ``config.probe_dir`` is set (answers: JSON values).

        Returns None, uncached, when the binary cannot be found.
        """
        env = self.environment(config)
        try:
            path = resolve_executable(config.binary, env)
            stat = os.stat(path)
        except (SpawnError, OSError):
            return None
        key = (purpose, os.path.realpath(path), stat.st_mtime_ns, stat.st_size)
        with _probe_lock:
            if key in _probe_cache:
                return cast(T, _probe_cache[key])
        stored = _stored_probe(config.probe_dir, key)
        if stored:
            value = stored[0]
        else:
            self.prepare_home(config)  # probes run with the isolated home too: CLIs write into it
            value = run(path, env, Path(config.home))
            _store_probe(config.probe_dir, key, value)
        with _probe_lock:
            _probe_cache[key] = value
        return value

    def detect_version(self, config: EngineConfig) -> str | None:
        """The CLI's version from ``<bin> --version`` (cached per binary), None if unavailable."""

        def read_version(path: str, env: dict[str, str], cwd: Path) -> str | None:
            try:
                code, output = run_quick([path, "--version"], cwd=cwd, env=env)
            except SpawnError:
                return None
            match = _VERSION.search(output)
            return match.group(0) if code == 0 and match else None

        return self.probe(config, "version", read_version)

    def models(self, config: EngineConfig) -> list[dict[str, Any]]:
        """A small static catalogue plus the operator's default model."""
        names = list(self.known_models)
        if config.default_model and config.default_model not in names:
            names.insert(0, config.default_model)
        return [
            {
                "id": name,
                "display_name": name,
                "is_default": name == config.default_model,
                "provider_id": self.provider_id,
                "model": name,
                "deprecated": False,
                "supported_effort": list(self.efforts),
            }
            for name in names
        ]

    def effort_settings(self, effort: str) -> dict[str, Any]:
        """The engine settings that ask for `effort` (one of `efforts`), merged over the skill's."""
        return {}
