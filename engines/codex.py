"""OpenAI Codex CLI (``codex exec --json``), resumable by thread id."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tomli_w

from .activity import Activity, ActivityParser, compact_json, usage_report
from .base import EngineAdapter, EngineOutput, argv_prompt, json_lines, write_if_changed
from .process import SpawnError, run_quick
from .provider_api import OPENAI_RESPONSES
from .skill_config import deep_merge
from .types import EngineConfig, TurnRequest

FULL_AUTO = "--full-auto"
YOLO = "--yolo"
BYPASS = "--dangerously-bypass-approvals-and-sandbox"
PROVIDER_ID = "skillrunner"
PROVIDER_KEY_VAR = "SKILLRUNNER_PROVIDER_API_KEY"


def _lists_flag(help_text: str, flag: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", help_text) is not None


def choose_auto_flag(path: str, env: dict[str, str], cwd: Path) -> str:
    """R-EN1: ``--full-auto`` when listed by ``codex exec --help``, else ``--yolo``.

    Codex 0.169 lists neither: ``--yolo`` is a hidden alias of the bypass flag there, so it is
    tried (``exec --yolo --help`` parses the flag before printing help). The bypass flag itself
    is the last resort.
    """
    try:
        code, help_text = run_quick([path, "exec", "--help"], cwd=cwd, env=env)
        if code == 0 and _lists_flag(help_text, FULL_AUTO):
            return FULL_AUTO
        if _lists_flag(help_text, YOLO) or run_quick([path, "exec", YOLO, "--help"], cwd=cwd, env=env)[0] == 0:
            return YOLO
    except SpawnError:
        return YOLO
    return BYPASS if _lists_flag(help_text, BYPASS) else YOLO


def _tool_name_and_command(item: dict[str, Any]) -> tuple[str, str] | None:
    kind = item.get("type")
    if kind == "command_execution":
        return "shell", str(item.get("command") or "")
    if kind == "mcp_tool_call":
        name = ".".join(str(part) for part in (item.get("server"), item.get("tool")) if part)
        return name or "mcp", compact_json(item.get("arguments") or {})
    if kind == "web_search":
        return "web_search", str(item.get("query") or "")
    return None


class CodexActivity(ActivityParser):
    """``exec --json`` items: command executions, MCP calls, reasoning, messages, file changes, plans."""

    def on_event(self, event: dict[str, Any]) -> list[Activity]:
        kind = event.get("type")
        item = event.get("item")
        if kind == "turn.completed" or kind == "turn.failed":
            self.drop_held_text()
            return []
        if not isinstance(item, dict) or kind not in ("item.started", "item.updated", "item.completed"):
            return []
        item_id = str(item.get("id") or "")
        tool = _tool_name_and_command(item)
        if tool is not None:
            if kind == "item.started":
                return self.tool_started(item_id, *tool)
            if kind == "item.completed":
                exit_code = item.get("exit_code")
                ok = item.get("status") == "completed" and exit_code in (0, None)
                output = item.get("aggregated_output")
                if output is None:
                    output = item.get("error") or item.get("result")
                return self.tool_finished(
                    item_id,
                    ok=ok,
                    output=output if isinstance(output, str) else compact_json(output or ""),
                    exit_code=exit_code if isinstance(exit_code, int) else None,
                    name=tool[0],
                    command=tool[1],
                )
            return []
        item_type = item.get("type")
        if item_type == "todo_list":
            raw = item.get("items")
            steps = [
                {"text": str(step.get("text") or ""), "done": bool(step.get("completed"))}
                for step in (raw if isinstance(raw, list) else [])
                if isinstance(step, dict)
            ]
            return [*self.release_text(), {"type": "plan", "items": steps}]
        if kind != "item.completed":
            return []
        if item_type == "reasoning":
            return self.reasoning(str(item.get("text") or ""))
        if item_type == "agent_message":
            return self.message_text(str(item.get("text") or ""))
        if item_type == "file_change":
            raw = item.get("changes")
            paths = [str(c.get("path")) for c in (raw if isinstance(raw, list) else []) if isinstance(c, dict)]
            return [*self.release_text(), {"type": "file_change", "paths": paths}] if paths else []
        return []


class CodexAdapter(EngineAdapter):
    name = "codex"
    skill_defaults_file = "assets/codex_config.toml"
    skill_root = ".codex"
    listing_order = 10
    known_models = ("gpt-5.5", "gpt-5.1-codex-mini")
    provider_id = "openai"
    efforts = ("minimal", "low", "medium", "high")
    default_provider_url = "https://api.openai.com/v1"
    provider_api = OPENAI_RESPONSES

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return [self.probe(config, "codex-auto-flag", choose_auto_flag) or YOLO]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        argv = [config.binary, "exec", "--skip-git-repo-check", "--json", *self.auto_flags(config)]
        argv += self.model_args(request, config)
        if request.is_resume:
            argv += ["resume", str(request.session_handle)]
        return argv + [argv_prompt(request.prompt)]

    def effort_settings(self, effort: str) -> dict[str, Any]:
        return {"model_reasoning_effort": effort}

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        env = {"CODEX_HOME": str(config.home)}
        if config.api_key:
            if config.base_url:
                env[PROVIDER_KEY_VAR] = config.api_key
            else:
                env["OPENAI_API_KEY"] = env["CODEX_API_KEY"] = config.api_key
        return env

    def prepare_home(self, config: EngineConfig) -> None:
        super().prepare_home(config)
        operator: dict[str, Any] = {
            "check_for_update_on_startup": False,
            "analytics": {"enabled": False},
            # A login shell re-reads /etc/profile, which resets PATH: the agent's commands would
            # lose what the service put first on it (a skill's dependency environment, R-SK7).
            "allow_login_shell": False,
        }
        if config.base_url:
            # A custom provider speaks plain HTTP+SSE (the built-in one tries WebSockets first),
            # and few retries keep a dead endpoint from eating the whole hard timeout (R-EN8).
            operator["model_provider"] = PROVIDER_ID
            operator["model_providers"] = {
                PROVIDER_ID: {
                    "name": PROVIDER_ID,
                    "base_url": config.base_url,
                    "wire_api": "responses",
                    "env_key": PROVIDER_KEY_VAR,
                    "request_max_retries": 1,
                    "stream_max_retries": 1,
                }
            }
        # The skill's defaults (model, reasoning effort, ...) beneath the operator's (R-SK9).
        settings = deep_merge(config.skill_settings, operator)
        header = "# Written by Skill Runner for every run of this engine home; edits are overwritten.\n"
        write_if_changed(Path(config.home) / "config.toml", header + tomli_w.dumps(settings), Path(config.home))

    def activity_parser(self) -> CodexActivity:
        return CodexActivity()

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        events = json_lines(stdout)
        output = EngineOutput()
        for event in events:
            if event.get("type") == "thread.started" and isinstance(event.get("thread_id"), str):
                output.session_handle = event["thread_id"]
                break
        # Only the latest turn counts: a resumed thread may replay earlier turns.
        starts = [index for index, event in enumerate(events) if event.get("type") == "turn.started"]
        turn = events[starts[-1] :] if starts else events
        completed = False
        notice: str | None = None
        for event in turn:
            kind = event.get("type")
            raw_item = event.get("item")
            item = raw_item if isinstance(raw_item, dict) else {}
            if kind == "item.completed" and item.get("type") == "agent_message":
                output.final_message = str(item.get("text") or "")
            elif kind == "turn.failed":
                error = event.get("error")
                output.error = str((error.get("message") if isinstance(error, dict) else error) or "turn failed")
            elif kind == "turn.completed":
                completed = True
                usage = event.get("usage")
                if isinstance(usage, dict):
                    output.usage = usage_report(
                        usage.get("input_tokens"),
                        usage.get("cached_input_tokens"),
                        usage.get("output_tokens"),
                        usage.get("reasoning_output_tokens"),
                    )
            elif kind == "error":
                notice = str(event.get("message") or "error")
        if output.error is None and notice is not None and not completed:
            output.error = notice  # an error event with no completed turn after it was fatal
        return output
