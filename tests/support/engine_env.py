"""Run the real engine CLIs isolated and offline against the scripted model server (tests only).

Given an engine name, the fake server's URL and a fresh temporary home directory, ``engine_env``
writes the config files the CLI needs into that home and returns the complete environment for the
subprocess. Nothing of the caller's environment leaks in except ``PATH`` and the locale, so real API
keys or a real ``~/.codex`` can never be picked up, and no CLI writes outside the temp home.

Layout of a home (one per CLI per test)::

    <home>/            HOME (all three CLIs write caches/state below $HOME unless redirected)
    <home>/tmp/        TMPDIR (Gemini drops gemini-client-error-*.json into os.tmpdir() on API errors)
    <home>/.codex/     CODEX_HOME + config.toml
    <home>/.gemini/    settings.json, sessions (GEMINI_CLI_HOME=<home>)
    <home>/.claude/    CLAUDE_CONFIG_DIR
    <home>/.qwen/      QWEN_HOME: settings.json, sessions
    <home>/config/ …   XDG_CONFIG_HOME, XDG_DATA_HOME, … of OpenCode and Kilo (data/<cli>/<cli>.db)

The per-engine docstrings (``codex_env``, ``gemini_env``, ``claude_env``, ``qwen_env``, ``opencode_env``,
``kilo_env``) say exactly which files and
variables are needed and why; the production adapters in ``engines/`` should mirror them.

The module also holds the argv builders and a subprocess runner with a hard timeout that kills the
whole process group, shared by the real-engine tests and ``tests/support/record_golden.py``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_DIR = REPO_ROOT / "engines" / "cli"
BIN_DIR = CLI_DIR / "node_modules" / ".bin"

ENGINES = ("codex", "gemini", "claude", "qwen", "opencode", "kilo")
API_KEY = "test-key"  # dummy; the scripted server accepts anything
CODEX_MODEL = "gpt-5.5"  # a slug in Codex 0.169's bundled catalog -> no "model metadata" warning item
GEMINI_MODEL = "gemini-2.5-flash"  # pinned: the default "auto" model adds a router side call per turn
QWEN_MODEL = "qwen3-coder-plus"  # any name works; without one Qwen Code 0.24 asks for "qwen3.7-max"
CODEX_PROVIDER_ID = "scripted"
CODEX_KEY_ENV = "SCRIPTED_MODEL_API_KEY"
OPENCODE_MODEL = "scripted-model"  # any name: the config's provider entry declares it
# OpenCode and its fork Kilo: the prefix of their variables and the plugin package they install.
OPENCODE_FAMILY = {"opencode": ("OPENCODE", "@opencode-ai/plugin"), "kilo": ("KILO", "@kilocode/plugin")}
# CLIs given their prompt on stdin: both wrap any argument holding a space in literal quotes.
PROMPT_ON_STDIN = set(OPENCODE_FAMILY)


def engine_binary(engine: str) -> Path:
    """Path of the pinned CLI installed by ``make engines`` (``npm ci`` in engines/cli)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    return BIN_DIR / engine


def base_env(home: Path) -> dict[str, str]:
    """A minimal environment rooted in ``home``: PATH and locale from the caller, nothing else."""
    home = Path(home)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "NO_COLOR": "1",
    }
    if "LC_ALL" in os.environ:
        env["LC_ALL"] = os.environ["LC_ALL"]
    return env


def codex_env(server_url: str, home: Path) -> dict[str, str]:
    """Codex CLI 0.169: ``CODEX_HOME`` + ``$CODEX_HOME/config.toml`` with a custom model provider.

    * ``CODEX_HOME=<home>/.codex`` -- sessions (SQLite ``state_*.sqlite``), logs and the arg0 helper
      binaries live here; without it Codex writes to ``~/.codex`` (even for ``--version``).
    * ``config.toml`` sets ``model_provider`` to a custom ``[model_providers.<id>]`` entry with
      ``base_url = "<server>/v1"`` (Codex POSTs ``{base_url}/responses``) and
      ``wire_api = "responses"`` (the only value 0.169 accepts). The built-in ``openai`` provider
      would try WebSockets first and ignores ``OPENAI_BASE_URL``, so a custom provider is required.
    * ``env_key = "SCRIPTED_MODEL_API_KEY"`` names the variable holding the key; Codex sends it as
      ``Authorization: Bearer <value>``, so that variable must be set.
    * ``request_max_retries = 0`` and ``stream_max_retries = 0``: an HTTP 5xx fails the turn in
      well under a second instead of ~25 s of retries. (A *refused connection* still makes Codex
      wait "for network" forever -- always run it under a hard timeout.)
    * ``model = "gpt-5.5"`` (also passed as ``-m``): a slug from the bundled model catalog, so
      stdout has no extra ``"Model metadata ... not found"`` error item.
    * ``TMPDIR`` points into the home: Codex refuses to create its PATH helper aliases under a
      temporary dir and prints a warning when CODEX_HOME is inside ``$TMPDIR``.
    Invoke with ``stdin=DEVNULL`` (else it prints "Reading additional input from stdin...").
    """
    env = base_env(home)
    codex_home = Path(home) / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    base_url = server_url.rstrip("/") + "/v1"
    (codex_home / "config.toml").write_text(
        f"""model = "{CODEX_MODEL}"
model_provider = "{CODEX_PROVIDER_ID}"
check_for_update_on_startup = false

[model_providers.{CODEX_PROVIDER_ID}]
name = "Scripted"
base_url = "{base_url}"
wire_api = "responses"
env_key = "{CODEX_KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
""",
        encoding="utf-8",
    )
    env["CODEX_HOME"] = str(codex_home)
    env[CODEX_KEY_ENV] = API_KEY
    return env


def gemini_env(server_url: str, home: Path) -> dict[str, str]:
    """Gemini CLI 0.61: ``GEMINI_CLI_HOME`` + ``$GEMINI_CLI_HOME/.gemini/settings.json`` + key/URL.

    * ``GEMINI_CLI_HOME=<home>`` -- Gemini uses it instead of the OS home dir and keeps everything in
      ``<home>/.gemini/`` (settings.json, projects.json, ``tmp/<project>/chats/session-*.jsonl``).
    * ``GEMINI_API_KEY`` (sent as ``x-goog-api-key``) and ``GOOGLE_GEMINI_BASE_URL=<server>`` with
      no ``/v1beta`` (the SDK appends it; plain http is allowed only for loopback hosts).
    * settings.json:
      ``security.auth.selectedType = "gemini-api-key"`` -- required: with a base URL set and no
      selected type the CLI picks auth type "gateway" and exits 41 "Invalid auth method selected.";
      ``security.folderTrust.enabled = false`` -- otherwise an untrusted cwd silently downgrades
      ``--yolo`` to the default approval mode (tool calls are then refused);
      ``general.maxAttempts = 1`` -- an HTTP 5xx fails at once (exit 244) instead of retrying with
      backoff for minutes; auto-update, usage statistics and telemetry are switched off.
    * ``GEMINI_CLI_NO_RELAUNCH=1`` -- by default ``gemini`` re-spawns itself as a child node process
      (to raise the heap limit); skipping that saves startup time and keeps one process per run.
    Pin the model with ``-m gemini-2.5-flash`` (no router side call). Resume (``--resume <id>``) is
    scoped to the project, i.e. the cwd: run the resumed turn from the same directory.

    **Stale lock:** a headless run usually exits while still holding the proper-lockfile directory
    lock ``<home>/.gemini/projects.json.lock`` (taken at every startup to map the cwd to a project
    id). The next run in the same home then backs off until the lock is 10 s old: it starts
    13-26 s late. Remove that directory once the previous Gemini process group has exited (see
    ``clear_stale_locks``; ``run_cli`` does it before and after every run).
    """
    env = base_env(home)
    gemini_dir = Path(home) / ".gemini"
    gemini_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {
            "auth": {"selectedType": "gemini-api-key"},
            "folderTrust": {"enabled": False},
        },
        "general": {
            "maxAttempts": 1,
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    (gemini_dir / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    env["GEMINI_CLI_HOME"] = str(home)
    env["GEMINI_API_KEY"] = API_KEY
    env["GOOGLE_GEMINI_BASE_URL"] = server_url.rstrip("/")
    env["GEMINI_CLI_NO_RELAUNCH"] = "1"
    return env


def claude_env(server_url: str, home: Path) -> dict[str, str]:
    """Claude Code 2.1.332: environment variables only, no config file is needed.

    * ``CLAUDE_CONFIG_DIR=<home>/.claude`` -- sessions/settings go there instead of ``~/.claude``
      and ``~/.claude.json``.
    * ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``) and ``ANTHROPIC_BASE_URL=<server>`` (Claude
      POSTs ``/v1/messages?beta=true``).
    * ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``, ``DISABLE_AUTOUPDATER=1``,
      ``DISABLE_TELEMETRY=1`` -- no update checks, telemetry or other calls to the internet.
    * ``IS_SANDBOX=1`` -- the tests run as root, and as root Claude refuses
      ``--dangerously-skip-permissions`` unless this is set. (``--allowedTools Bash`` works
      without it.)
    * ``CLAUDE_CODE_MAX_RETRIES=0`` -- an HTTP 5xx ends the turn at once instead of retrying with
      backoff.
    """
    env = base_env(home)
    config_dir = Path(home) / ".claude"
    config_dir.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": server_url.rstrip("/"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "IS_SANDBOX": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
    )
    return env


def qwen_env(server_url: str, home: Path) -> dict[str, str]:
    """Qwen Code 0.24.4: ``QWEN_HOME`` + ``$QWEN_HOME/settings.json`` + an OpenAI-compatible key and URL.

    * ``QWEN_HOME=<home>/.qwen`` -- settings.json, and everything the CLI writes: sessions
      (``projects/<cwd with / as ->/chats/<session id>.jsonl``), extension state, usage records.
      Nothing lands in ``$HOME`` or ``$TMPDIR`` with it set.
    * ``OPENAI_API_KEY`` (sent as ``Authorization: Bearer``) and ``OPENAI_BASE_URL=<server>/v1``
      (the CLI POSTs ``{base}/chat/completions``, streamed, ``stream_options.include_usage``).
    * settings.json: ``security.auth.selectedType = "openai"`` -- the auth type that reads those
      two variables; ``memory.enableManagedAutoMemory/enableManagedAutoDream = false`` --
      otherwise a background memory agent sends one more chat request after every turn (and
      writes memory files); ``general.preventSystemSleep = false`` -- otherwise it starts
      ``systemd-inhibit`` for every model call; auto-update, usage statistics and telemetry off;
      ``model.generationConfig.maxRetries = 0`` -- the OpenAI SDK's own retries.
    * ``QWEN_CODE_NO_RELAUNCH=1`` -- by default the CLI re-spawns itself as one more node process.
    * ``QWEN_CODE_SUPPRESS_YOLO_WARNING=1`` -- a stderr notice that ``--yolo`` runs unsandboxed.
    An HTTP 5xx is retried 7 times with backoff (about 80 s) whatever the settings say; an HTTP
    400 fails the turn at once. Resume (``--resume <id>``) is scoped to the cwd, as Gemini's is.
    """
    env = base_env(home)
    qwen_home = Path(home) / ".qwen"
    qwen_home.mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "openai"}},
        "general": {"enableAutoUpdate": False, "preventSystemSleep": False},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "model": {"generationConfig": {"maxRetries": 0}},
    }
    (qwen_home / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    env.update(
        {
            "QWEN_HOME": str(qwen_home),
            "OPENAI_API_KEY": API_KEY,
            "OPENAI_BASE_URL": server_url.rstrip("/") + "/v1",
            "QWEN_CODE_NO_RELAUNCH": "1",
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }
    )
    return env


def opencode_env(server_url: str, home: Path, engine: str = "opencode") -> dict[str, str]:
    """OpenCode 1.18.33 (and Kilo, ``engine="kilo"``: the same program with ``KILO_`` variables and
    ``kilo`` folders): its XDG folders in ``home`` and the whole config in one variable.

    * ``XDG_CONFIG_HOME``, ``XDG_DATA_HOME``, ``XDG_CACHE_HOME``, ``XDG_STATE_HOME`` -- everything
      (config, the SQLite session store ``data/opencode/opencode.db``, logs, locks) stays in ``home``.
    * ``OPENCODE_CONFIG_CONTENT`` -- a provider ``scripted`` (``npm: @ai-sdk/openai-compatible``,
      bundled in the binary) with ``baseURL = <server>/v1`` (POST ``/v1/chat/completions``), the
      model declared (an undeclared ``-m`` model fails the turn), and only that provider enabled.
    * ``OPENCODE_DISABLE_MODELS_FETCH`` (models.dev), ``_AUTOUPDATE``, ``_SHARE``, ``_LSP_DOWNLOAD``,
      ``_DEFAULT_PLUGINS``, ``_PROJECT_CONFIG`` -- nothing fetched, nothing read from the cwd.
    * ``<config>/opencode/node_modules`` plus a ``package-lock.json`` naming ``@opencode-ai/plugin``:
      otherwise the CLI fetches that package from the npm registry into its config folder.
    * The adapter's activity plugin in ``<config>/opencode/plugins``: with it the stream has a
      ``skillrunner_tool_start`` line as each tool starts, as the service sees it.
    The prompt goes on stdin (see ``PROMPT_ON_STDIN``); resume with ``--session <sessionID>`` from
    the same cwd (from another one the turn runs but prints nothing). A retryable error (5xx, 429,
    connection refused) is retried 5 times with backoff (about a minute); no setting shortens it.
    """
    from engines.opencode_family import ACTIVITY_PLUGIN

    prefix, plugin_package = OPENCODE_FAMILY[engine]
    env = base_env(home)
    dirs = {"XDG_CONFIG_HOME": "config", "XDG_DATA_HOME": "data", "XDG_CACHE_HOME": "cache", "XDG_STATE_HOME": "state"}
    env.update({name: str(Path(home) / folder) for name, folder in dirs.items()})
    config_dir = Path(home) / "config" / engine
    (config_dir / "node_modules").mkdir(parents=True, exist_ok=True)
    (config_dir / "package-lock.json").write_text(
        json.dumps({"packages": {"": {"dependencies": {plugin_package: "*"}}}}), encoding="utf-8"
    )
    (config_dir / "plugins").mkdir(exist_ok=True)
    (config_dir / "plugins" / "skillrunner-activity.js").write_text(ACTIVITY_PLUGIN, encoding="utf-8")
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": server_url.rstrip("/") + "/v1", "apiKey": API_KEY},
        "models": {OPENCODE_MODEL: {"name": OPENCODE_MODEL, "tool_call": True}},
    }
    config = {
        "provider": {"scripted": provider},
        "enabled_providers": ["scripted"],
        "model": f"scripted/{OPENCODE_MODEL}",
    }
    env[f"{prefix}_CONFIG_CONTENT"] = json.dumps(config)
    for switch in ("MODELS_FETCH", "AUTOUPDATE", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS", "PROJECT_CONFIG"):
        env[f"{prefix}_DISABLE_{switch}"] = "1"
    return env


def kilo_env(server_url: str, home: Path) -> dict[str, str]:
    """Kilo 7.7.7: OpenCode's environment under its own names (``opencode_env``), and its own
    services off -- PostHog telemetry (``KILO_TELEMETRY_LEVEL=off``; otherwise each run also waits
    2 s at exit for it to give up), its shared daemon (``KILO_NO_DAEMON``), session upload and
    presence on Kilo's servers, code indexing. ``KILO_SESSION_RETRY_LIMIT=1``: an HTTP 5xx is
    retried once (0 means OpenCode's 5 retries with backoff). Kilo appends an
    ``<environment_details>`` block (time, cwd) to each prompt.
    """
    env = opencode_env(server_url, home, "kilo")
    env.update({"KILO_TELEMETRY_LEVEL": "off", "KILO_NO_DAEMON": "1", "KILO_SESSION_RETRY_LIMIT": "1"})
    for switch in ("SESSION_INGEST", "PRESENCE", "CODEBASE_INDEXING"):
        env[f"KILO_DISABLE_{switch}"] = "1"
    return env


def clear_stale_locks(env: dict[str, str]) -> None:
    """Remove Gemini's leftover ``projects.json.lock`` (see ``gemini_env``); no-op for others.

    Only safe when no Gemini process is running on that home, which holds for the sequential
    runs of one test.
    """
    gemini_home = env.get("GEMINI_CLI_HOME")
    if not gemini_home:
        return
    lock = Path(gemini_home) / ".gemini" / "projects.json.lock"
    try:
        lock.rmdir()
    except FileNotFoundError:
        pass


def engine_env(engine: str, server_url: str, home: Path) -> dict[str, str]:
    """Write ``engine``'s config into ``home`` and return the full subprocess environment."""
    builders: dict[str, Callable[[str, Path], dict[str, str]]] = {
        "codex": codex_env,
        "gemini": gemini_env,
        "claude": claude_env,
        "qwen": qwen_env,
        "opencode": opencode_env,
        "kilo": kilo_env,
    }
    if engine not in builders:
        raise ValueError(f"unknown engine {engine!r}")
    Path(home).mkdir(parents=True, exist_ok=True)
    return builders[engine](server_url, Path(home))


# ------------------------------------------------------------------------------------------------
# Command lines
# ------------------------------------------------------------------------------------------------


def codex_argv(prompt: str, resume: str | None = None) -> list[str]:
    """``codex exec`` (global flags before the ``resume`` subcommand)."""
    argv = [
        str(engine_binary("codex")),
        "exec",
        "--skip-git-repo-check",
        "--json",
        "--dangerously-bypass-approvals-and-sandbox",
        "-m",
        CODEX_MODEL,
    ]
    if resume:
        argv += ["resume", resume]
    return argv + [prompt]


def gemini_argv(prompt: str, resume: str | None = None, output_format: str = "json") -> list[str]:
    argv = [
        str(engine_binary("gemini")),
        "--yolo",
        "--output-format",
        output_format,
        "-m",
        GEMINI_MODEL,
    ]
    if resume:
        argv += ["--resume", resume]
    return argv + ["-p", prompt]


def claude_argv(prompt: str | None = None, resume: str | None = None) -> list[str]:
    """One-shot ``claude -p <prompt>``, or with ``prompt=None`` the resident stream-json process."""
    argv = [str(engine_binary("claude")), "-p"]
    if prompt is None:
        argv += ["--input-format", "stream-json"]
    argv += ["--output-format", "stream-json", "--verbose", "--allowedTools", "Bash"]
    if resume:
        argv += ["--resume", resume]
    if prompt is not None:
        # "--" because --allowedTools is variadic and would swallow a trailing prompt.
        argv += ["--", prompt]
    return argv


def qwen_argv(prompt: str, resume: str | None = None) -> list[str]:
    """``qwen -p`` with stream-json output, as the adapter runs it (the same line as Gemini's)."""
    argv = [str(engine_binary("qwen"))]
    if resume:
        argv += ["--resume", resume]
    return argv + ["--yolo", "--output-format", "stream-json", "-m", QWEN_MODEL, "-p", prompt]


def opencode_argv(resume: str | None = None, engine: str = "opencode") -> list[str]:
    """``opencode run`` (or ``kilo run``) without its prompt, which goes on stdin; ``--auto``
    approves the tools."""
    argv = [str(engine_binary(engine)), "run", "--format", "json", "--auto", "--thinking"]
    argv += ["--session", resume] if resume else ["--title", "golden"]
    return argv + ["-m", f"scripted/{OPENCODE_MODEL}"]


# ------------------------------------------------------------------------------------------------
# Running a CLI with a hard timeout
# ------------------------------------------------------------------------------------------------


@dataclass
class CliRun:
    argv: list[str]
    returncode: int | None  # None only if the process could not be reaped
    stdout: str
    stderr: str
    duration: float
    timed_out: bool

    def json_lines(self) -> list[dict[str, Any]]:
        """stdout parsed as JSONL (non-JSON lines skipped)."""
        return parse_json_lines(self.stdout)

    def json_doc(self) -> Any:
        """stdout parsed as one JSON document (Gemini ``--output-format json``)."""
        return json.loads(self.stdout)


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group started with ``start_new_session=True`` (idempotent)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_cli(
    argv: Sequence[str],
    env: dict[str, str],
    cwd: Path,
    timeout: float = 60.0,
    stdin: str | None = None,
) -> CliRun:
    """Run one CLI turn: stdin=DEVNULL (or ``stdin``, then EOF), own session, output read to EOF,
    group killed at the end.

    On timeout the whole process group is SIGKILLed and ``timed_out`` is True. Gemini's stale
    ``projects.json.lock`` is cleared before and after the run (see ``gemini_env``).
    """
    clear_stale_locks(env)
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(cwd),
        env=env,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(None if stdin is None else stdin.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        out, err = proc.communicate(timeout=10)
    finally:
        # Also reap helpers that outlived the main process (the group shares our session id).
        kill_group(proc)
    clear_stale_locks(env)
    return CliRun(
        argv=list(argv),
        returncode=proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        duration=time.monotonic() - start,
        timed_out=timed_out,
    )


@dataclass
class ResidentCli:
    """A long-lived CLI reading JSON lines on stdin (``claude -p --input-format stream-json``).

    stdout/stderr are drained by background threads; ``read_until`` returns the stdout events up to
    and including the first one matching the predicate.
    """

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    proc: subprocess.Popen | None = None
    stdout_lines: list[str] = field(default_factory=list)
    stderr_lines: list[str] = field(default_factory=list)
    _events: queue.Queue[dict[str, Any] | None] = field(default_factory=queue.Queue)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> ResidentCli:
        clear_stale_locks(self.env)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(self.cwd),
            env=self.env,
            start_new_session=True,
        )
        self._threads = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def _pump_stdout(self) -> None:
        assert self.proc and self.proc.stdout
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace")
            self.stdout_lines.append(line)
            for event in parse_json_lines(line):
                self._events.put(event)
        self._events.put(None)  # EOF

    def _pump_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        for raw in self.proc.stderr:
            self.stderr_lines.append(raw.decode("utf-8", "replace"))

    def send(self, payload: dict[str, Any]) -> None:
        assert self.proc and self.proc.stdin
        self.proc.stdin.write((json.dumps(payload) + "\n").encode())
        self.proc.stdin.flush()

    def send_user_text(self, text: str) -> None:
        self.send({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]}})

    def read_until(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        events: list[dict[str, Any]] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching event within {timeout}s; got {events!r}")
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                continue
            if event is None:
                raise EOFError(f"stdout closed before a matching event; got {events!r}")
            events.append(event)
            if predicate(event):
                return events

    def close(self, timeout: float = 30.0) -> int | None:
        """Close stdin (ends the session) and wait; kill the group if it does not exit in time."""
        if self.proc is None:
            return None
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        kill_group(self.proc)
        self.proc.wait(timeout=10)
        for t in self._threads:
            t.join(timeout=5)
        clear_stale_locks(self.env)
        return self.proc.returncode

    @property
    def stdout(self) -> str:
        return "".join(self.stdout_lines)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def __enter__(self) -> ResidentCli:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close(timeout=5)


# Models the scripted server serves without extra side calls (CODEX_MODEL, GEMINI_MODEL above).
SERVICE_MODELS = {
    "codex": CODEX_MODEL,
    "gemini": GEMINI_MODEL,
    "claude": "",
    "qwen": QWEN_MODEL,
    "opencode": OPENCODE_MODEL,
    "kilo": OPENCODE_MODEL,
}
# What the service's base URL adds to the scripted server's: the OpenAI clients append their
# endpoint (/responses, /chat/completions) to a base that ends in /v1.
SERVICE_URL_PATHS = {"codex": "/v1", "qwen": "/v1", "opencode": "/v1", "kilo": "/v1"}


def require_engine(engine: str) -> Path:
    """The pinned CLI binary; a missing one FAILS the test (``make test`` installs them)."""
    binary = engine_binary(engine)
    if not binary.exists():
        pytest.fail(
            f"{engine} CLI not installed at {binary}; run `make engines` (npm ci in engines/cli)",
            pytrace=False,
        )
    return binary
