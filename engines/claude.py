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

from .activity import Activity, ActivityParser, text_of, tool_summary, usage_report
from .base import EngineAdapter, EngineOutput, json_lines, write_if_changed
from .process import ResidentProcess, SpawnError, spawn
from .sandbox import SandboxUnavailable
from .types import FAILURE_PROCESS_LOST, EngineConfig, ExecutionMode, TurnControl, TurnRequest, TurnResult


def user_message(prompt: str) -> dict[str, Any]:
    """One stream-json stdin line carrying a user turn."""
    return {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}]}}


def _usage(usage: dict[str, Any], cost: Any) -> dict[str, Any]:
    """Anthropic counts cached input apart from ``input_tokens``; the report counts all input."""
    parts = [usage.get(key) for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    numbers = [part for part in parts if isinstance(part, int)]
    details = usage.get("output_tokens_details")
    return usage_report(
        sum(numbers) if numbers else None,
        usage.get("cache_read_input_tokens"),
        usage.get("output_tokens"),
        details.get("thinking_tokens") if isinstance(details, dict) else None,
        cost,
    )


def _is_result(event: dict[str, Any]) -> bool:
    return event.get("type") == "result"


def _assistant_text(event: dict[str, Any]) -> str:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        block.get("text", "") for block in content if isinstance(block, dict) and block.get("type") == "text"
    )


# Tools whose input names the file they write (reported as file changes too).
_FILE_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")


# The argument that says what a tool call does, by Claude Code's tool parameter names.
TOOL_SUMMARY_KEYS = ("command", "file_path", "path", "pattern", "url", "query", "description")


class ClaudeActivity(ActivityParser):
    """stream-json: assistant text/thinking/tool_use blocks and the user tool_result blocks."""

    def __init__(self) -> None:
        super().__init__()
        self._file_tools: dict[str, str] = {}  # tool id -> path written

    def on_event(self, event: dict[str, Any]) -> list[Activity]:
        kind = event.get("type")
        if kind == "result":
            self.drop_held_text()
            return []
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if kind not in ("assistant", "user") or not isinstance(content, list):
            return []
        items: list[Activity] = []
        for block in content:
            if isinstance(block, dict):
                items += self._block(block)
        return items

    def _block(self, block: dict[str, Any]) -> list[Activity]:
        block_type = block.get("type")
        if block_type == "text":
            released = self.release_text()
            self.hold_text(str(block.get("text") or ""))
            return released
        if block_type == "thinking":
            text = str(block.get("thinking") or "").strip()
            return [*self.release_text(), {"type": "reasoning", "text": text}] if text else []
        if block_type == "tool_use":
            tool_id, name, tool_input = str(block.get("id") or ""), str(block.get("name") or ""), block.get("input")
            if name == "TodoWrite" and isinstance(tool_input, dict) and isinstance(tool_input.get("todos"), list):
                steps = [
                    {"text": str(todo.get("content") or ""), "done": todo.get("status") == "completed"}
                    for todo in tool_input["todos"]
                    if isinstance(todo, dict)
                ]
                return [*self.release_text(), {"type": "plan", "items": steps}]
            if name in _FILE_TOOLS and isinstance(tool_input, dict):
                path = tool_input.get("file_path") or tool_input.get("notebook_path")
                if isinstance(path, str):
                    self._file_tools[tool_id] = path
            return self.tool_started(tool_id, name, tool_summary(tool_input, TOOL_SUMMARY_KEYS))
        if block_type == "tool_result":
            tool_id = str(block.get("tool_use_id") or "")
            ok = not block.get("is_error")
            items = self.tool_finished(tool_id, ok=ok, output=text_of(block.get("content")))
            path = self._file_tools.pop(tool_id, None)
            if ok and path:
                items.append({"type": "file_change", "paths": [path]})
            return items
        return []


class ClaudeAdapter(EngineAdapter):
    name = "claude"
    interactive_profile = "sticky_process"
    skill_root = ".claude"
    extra_control_names = (".mcp.json",)  # project MCP servers
    listing_order = 40
    model_flag = "--model"
    known_models = ("sonnet", "opus", "haiku")
    provider_id = "anthropic"
    default_provider_url = "https://api.anthropic.com"

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return ["--dangerously-skip-permissions"]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        if request.is_resume:
            raise ValueError("claude continues a conversation through its live session, not a resume command")
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
        output = EngineOutput()
        result: dict[str, Any] | None = None
        for event in json_lines(stdout):
            if output.session_handle is None and isinstance(event.get("session_id"), str):
                output.session_handle = event["session_id"]  # system/init comes first
            if event.get("type") == "assistant":
                output.final_message = _assistant_text(event) or output.final_message
            elif _is_result(event):
                result = event
        if result is None:
            output.error = "claude ended the turn without a result event"
            return output
        if isinstance(result.get("result"), str):
            output.final_message = result["result"]
        usage = result.get("usage")
        if isinstance(usage, dict):
            output.usage = _usage(usage, result.get("total_cost_usd"))
        if result.get("is_error") or str(result.get("subtype", "success")) != "success":
            output.error = output.final_message or f"claude turn failed ({result.get('subtype')})"
        return output

    def open_live_session(self, request: TurnRequest, config: EngineConfig, control: TurnControl) -> ClaudeLiveSession:
        """Start the resident process (no prompt sent yet); spawn trouble surfaces on ``send``."""
        try:
            sandbox, config = self.open_sandbox(request, config)
        except SandboxUnavailable as exc:
            return ClaudeLiveSession(self, request.mode, [], None, self.sandbox_failure(exc))
        try:
            argv = self.prepare_turn(request, config)
            proc = spawn(
                argv, Path(request.run_dir), self.environment(config, request), stdin_pipe=True, sandbox=sandbox
            )
        except (OSError, SpawnError) as exc:
            if sandbox is not None:
                sandbox.close()
            return ClaudeLiveSession(self, request.mode, [], None, self.spawn_failure(f"could not start claude: {exc}"))
        process = ResidentProcess(proc, config.kill_grace_seconds, sandbox)
        control.on_spawn(process.pid)
        return ClaudeLiveSession(self, request.mode, argv, process, None)

    def run_turn(self, request: TurnRequest, config: EngineConfig, control: TurnControl) -> TurnResult:
        """A one-off turn: start the process, send the prompt, end the process."""
        session = self.open_live_session(request, config, control)
        try:
            return session.send(request.prompt, control, request.hard_timeout_seconds)
        finally:
            session.close()


class ClaudeLiveSession:
    """A LiveSession over one resident Claude Code process."""

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
            user_message(prompt), control, hard_timeout_seconds, _is_result, self._adapter.line_reader(control)
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
