"""Google Gemini CLI (``gemini --output-format stream-json``), resumable by session id from the same cwd.

The stream is JSONL: ``init`` (session id), ``message`` (user, and assistant text in ``delta``
chunks), ``tool_use``/``tool_result`` and a final ``result`` (status, error, stats).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .activity import Activity, ActivityParser, tool_summary, usage_report
from .base import EngineOutput, json_lines, missing_event, write_json_settings
from .gemini_family import GeminiFamilyAdapter
from .provider_api import GEMINI
from .types import EngineConfig

# Tools whose parameters name the file they write (reported as file changes too).
_FILE_TOOLS = ("write_file", "replace", "edit")

# User-level settings.json in GEMINI_CLI_HOME (R-EN2, R-EN8). Folder trust must be off or the CLI
# silently downgrades --yolo for an untrusted run directory; without selectedType the custom base
# URL makes it pick an auth type it then rejects.
SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 2},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


# The argument that says what a tool call does, by Gemini CLI's tool parameter names.
TOOL_SUMMARY_KEYS = ("command", "file_path", "absolute_path", "path", "pattern", "url", "query")


class GeminiActivity(ActivityParser):
    """stream-json: assistant text deltas (held until something follows), tool uses and results."""

    def __init__(self) -> None:
        super().__init__()
        self._file_tools: dict[str, str] = {}

    def on_event(self, event: dict[str, Any]) -> list[Activity]:
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            self.hold_text(str(event.get("content") or ""))
            return []
        if kind == "tool_use":
            tool_id, name = str(event.get("tool_id") or ""), str(event.get("tool_name") or "")
            parameters = event.get("parameters")
            if name in _FILE_TOOLS and isinstance(parameters, dict) and isinstance(parameters.get("file_path"), str):
                self._file_tools[tool_id] = parameters["file_path"]
            return self.tool_started(tool_id, name, tool_summary(parameters, TOOL_SUMMARY_KEYS))
        if kind == "tool_result":
            tool_id = str(event.get("tool_id") or "")
            ok = event.get("status") == "success"
            error = event.get("error")
            output = event.get("output")
            if output is None and isinstance(error, dict):
                output = error.get("message")
            items = self.tool_finished(tool_id, ok=ok, output=output if isinstance(output, str) else "")
            path = self._file_tools.pop(tool_id, None)
            if ok and path:
                items.append({"type": "file_change", "paths": [path]})
            return items
        if kind == "result":
            self.drop_held_text()
        return []


class GeminiAdapter(GeminiFamilyAdapter):
    name = "gemini"
    skill_defaults_file = "assets/gemini_settings.json"
    skill_root = ".gemini"
    extra_control_names = (".env",)  # Gemini CLI loads the .env it finds in its working directory
    listing_order = 20
    known_models = ("gemini-2.5-flash", "gemini-2.5-pro")
    provider_id = "google"
    default_provider_url = "https://generativelanguage.googleapis.com"
    provider_api = GEMINI

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        # NO_RELAUNCH: the CLI otherwise re-spawns itself, leaving two node processes per turn.
        env = {"GEMINI_CLI_HOME": str(config.home), "GEMINI_CLI_NO_RELAUNCH": "1"}
        if config.api_key:
            env["GEMINI_API_KEY"] = config.api_key
        if config.base_url:
            env["GOOGLE_GEMINI_BASE_URL"] = config.base_url
        return env

    def prepare_home(self, config: EngineConfig) -> None:
        super().prepare_home(config)
        gemini_dir = Path(config.home) / ".gemini"
        write_json_settings(gemini_dir / "settings.json", SETTINGS, config)
        # Gemini 0.61 often exits still holding this lock folder, and the next process in the same
        # home then stalls until the lock is 10 s old. A home belongs to one run, whose turns are
        # sequential, so a lock present before a turn starts is always stale.
        try:
            (gemini_dir / "projects.json.lock").rmdir()
        except OSError:  # absent, or not empty (then not the CLI's lock folder)
            pass

    def activity_parser(self) -> GeminiActivity:
        return GeminiActivity()

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        output = EngineOutput()
        texts: list[str] = []  # the assistant text since the latest tool call: the final answer
        result: dict[str, Any] | None = None
        for event in json_lines(stdout):
            kind = event.get("type")
            if kind == "init" and isinstance(event.get("session_id"), str) and event["session_id"]:
                output.session_handle = event["session_id"]
            elif kind == "message" and event.get("role") == "assistant":
                texts.append(str(event.get("content") or ""))
            elif kind in ("tool_use", "tool_result"):
                texts = []
            elif kind == "result":
                result = event
        output.final_message = "".join(texts)
        if result is None:
            output.error = missing_event("gemini", "result", stderr)
            return output
        stats = result.get("stats")
        if isinstance(stats, dict):
            output.usage = usage_report(
                stats.get("input_tokens"), stats.get("cached"), stats.get("output_tokens"), stats.get("thoughts")
            )
        if result.get("status") != "success":
            error = result.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            output.error = str(message or f"gemini reported status {result.get('status')!r}")
        return output
