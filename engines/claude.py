"""Claude Code as a resident process (sticky_process): stream-json in, stream-json out.

The prompt of every turn is one user message on stdin; the turn ends with the ``result``
event, and the process stays alive for the reply (R-LC7). Permissions: Claude Code runs with
``--dangerously-skip-permissions`` — the counterpart of the other engines' ``--yolo`` — plus
``IS_SANDBOX=1``, without which it refuses that flag when the server runs as root.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .activity import usage_report
from .base import EngineAdapter, EngineOutput, write_if_changed
from .process import ResidentProcess, SpawnError, spawn
from .provider_api import ANTHROPIC_MESSAGES
from .sandbox import SandboxUnavailable
from .stream_json import StreamJsonActivity, is_result, stream_json_output
from .types import FAILURE_PROCESS_LOST, EngineConfig, ExecutionMode, TurnControl, TurnRequest, TurnResult


def user_message(prompt: str) -> dict[str, Any]:
    """One stream-json stdin line carrying a user turn."""
    return {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}]}}


def _usage(events: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any] | None:
    """Anthropic counts cached input apart from ``input_tokens``; the report counts all input."""
    usage = result.get("usage")
    if not isinstance(usage, dict):
        return None
    parts = [usage.get(key) for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    numbers = [part for part in parts if isinstance(part, int)]
    details = usage.get("output_tokens_details")
    return usage_report(
        sum(numbers) if numbers else None,
        usage.get("cache_read_input_tokens"),
        usage.get("output_tokens"),
        details.get("thinking_tokens") if isinstance(details, dict) else None,
        result.get("total_cost_usd"),
    )


class ClaudeActivity(StreamJsonActivity):
    file_tools = ("Write", "Edit", "MultiEdit", "NotebookEdit")
    plan_tool = "TodoWrite"
    summary_keys = ("command", "file_path", "path", "pattern", "url", "query", "description")


class ClaudeAdapter(EngineAdapter):
    name = "claude"
    skill_defaults_file = "assets/claude_settings.json"
    interactive_profile = "sticky_process"
    skill_root = ".claude"
    extra_control_names = (".mcp.json",)  # project MCP servers
    listing_order = 40
    model_flag = "--model"
    known_models = ("sonnet", "opus", "haiku")
    provider_id = "anthropic"
    default_provider_url = "https://api.anthropic.com"
    provider_api = ANTHROPIC_MESSAGES

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return ["--dangerously-skip-permissions"]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        if request.is_resume:
            raise ValueError("claude continues a conversation through its resident session, not a resume command")
        return [
            config.binary,
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            *self.auto_flags(config),
            *self.model_args(request, config),
        ]

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        env = {
            "CLAUDE_CONFIG_DIR": str(config.home),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "IS_SANDBOX": "1",
            "CLAUDE_CODE_MAX_RETRIES": "2",  # a failing endpoint should not eat the hard timeout
        }
        if config.api_key:
            env["ANTHROPIC_API_KEY"] = config.api_key
        if config.base_url:
            env["ANTHROPIC_BASE_URL"] = config.base_url
        return env

    def activity_parser(self) -> ClaudeActivity:
        return ClaudeActivity()

    def prepare_home(self, config: EngineConfig) -> None:
        super().prepare_home(config)
        if config.skill_settings:  # the skill's defaults (R-SK9); the operator's travel in the environment
            write_if_changed(
                Path(config.home) / "settings.json",
                json.dumps(config.skill_settings, indent=2) + "\n",
                Path(config.home),
            )

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        return stream_json_output(stdout, self.name, _usage)

    def open_resident_session(
        self, request: TurnRequest, config: EngineConfig, control: TurnControl
    ) -> ClaudeResidentSession:
        """Start the resident process (no prompt sent yet); spawn trouble surfaces on ``send``."""
        try:
            sandbox, config = self.open_sandbox(request, config)
        except SandboxUnavailable as exc:
            return ClaudeResidentSession(self, request.mode, [], None, self.sandbox_failure(exc))
        try:
            argv = self.prepare_turn(request, config)
            proc = spawn(
                argv, Path(request.run_dir), self.environment(config, request), stdin_pipe=True, sandbox=sandbox
            )
        except (OSError, SpawnError) as exc:
            if sandbox is not None:
                sandbox.close()
            return ClaudeResidentSession(
                self, request.mode, [], None, self.spawn_failure(f"could not start claude: {exc}")
            )
        process = ResidentProcess(proc, config.kill_grace_seconds, sandbox)
        control.on_spawn(process.pid)
        return ClaudeResidentSession(self, request.mode, argv, process, None)

    def run_turn(self, request: TurnRequest, config: EngineConfig, control: TurnControl) -> TurnResult:
        """A one-off turn: start the process, send the prompt, end the process."""
        session = self.open_resident_session(request, config, control)
        try:
            return session.send(request.prompt, control, request.hard_timeout_seconds)
        finally:
            session.close()


class ClaudeResidentSession:
    """A ResidentSession over one resident Claude Code process."""

    def __init__(
        self,
        adapter: ClaudeAdapter,
        mode: ExecutionMode,
        argv: list[str],
        process: ResidentProcess | None,
        start_failure: TurnResult | None,
    ) -> None:
        self._adapter = adapter
        self._mode = mode
        self._argv = argv
        self._process = process
        self._start_failure = start_failure
        self._cost_so_far = 0.0  # Claude reports the process's cumulative cost with every result

    def send(self, prompt: str, control: TurnControl, hard_timeout_seconds: float) -> TurnResult:
        """One turn: write ``prompt`` as a user message, read up to the ``result`` event."""
        if self._process is None:
            assert self._start_failure is not None
            return self._start_failure
        if not self._process.is_alive():
            return TurnResult(
                outcome="error",
                failure_reason=FAILURE_PROCESS_LOST,
                failure_message="the claude process is no longer running",
                exit_code=self._process.proc.returncode,
                command=list(self._argv),
            )
        proc = self._process.exchange(
            user_message(prompt), control, hard_timeout_seconds, is_result, self._adapter.line_reader(control)
        )
        result = self._adapter.turn_result(proc, self._mode, self._argv)
        if result.usage is not None and result.usage["cost_usd"] is not None:
            total = result.usage["cost_usd"]
            result.usage["cost_usd"] = max(0.0, total - self._cost_so_far)
            self._cost_so_far = total
        return result

    def is_alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def close(self) -> None:
        if self._process is not None:
            self._process.close()
