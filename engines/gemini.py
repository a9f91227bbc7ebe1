"""Google Gemini CLI (``gemini --output-format json``), resumable by session id from the same cwd."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .base import EngineAdapter, EngineOutput, argv_prompt, write_if_changed
from .types import EngineConfig, TurnRequest

_DOCUMENT_KEYS = ("session_id", "response", "error")
_LINE_START_BRACE = re.compile(r"^[ \t]*\{", re.MULTILINE)

# User-level settings.json in GEMINI_CLI_HOME (R-EN2, R-EN8). Folder trust must be off or the CLI
# silently downgrades --yolo for an untrusted run directory; without selectedType the custom base
# URL makes it pick an auth type it then rejects.
SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 2},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def last_json_document(text: str) -> dict[str, Any] | None:
    """The last JSON result document in ``text``; noise lines may precede or separate them."""
    decoder = json.JSONDecoder()
    found = None
    position = 0
    while True:
        match = _LINE_START_BRACE.search(text, position)
        if match is None:
            return found
        start = match.end() - 1
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            position = match.end()
            continue
        if isinstance(value, dict) and any(key in value for key in _DOCUMENT_KEYS):
            found = value
        position = end


class GeminiAdapter(EngineAdapter):
    name = "gemini"
    skill_root = ".gemini"
    known_models = ("gemini-2.5-flash", "gemini-2.5-pro")

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return ["--yolo"]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        argv = [config.binary]
        if request.is_resume:
            argv += ["--resume", str(request.session_handle)]
        argv += [*self.auto_flags(config), "--output-format", "json", *self.model_args(request, config)]
        return argv + ["-p", argv_prompt(request.prompt)]

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
        write_if_changed(gemini_dir / "settings.json", json.dumps(SETTINGS, indent=2) + "\n")
        # Gemini 0.61 often exits still holding this lock folder, and the next process in the same
        # home then stalls until the lock is 10 s old. A home belongs to one run, whose turns are
        # sequential, so a lock present before a turn starts is always stale.
        try:
            (gemini_dir / "projects.json.lock").rmdir()
        except OSError:  # absent, or not empty (then not the CLI's lock folder)
            pass

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        document = last_json_document(stdout) or last_json_document(stderr)
        if document is None:
            return EngineOutput(error="gemini printed no JSON result")
        session = document.get("session_id")
        output = EngineOutput(session_handle=session if isinstance(session, str) and session else None)
        response = document.get("response")
        if isinstance(response, str):
            output.final_message = response
        elif response is not None:
            output.final_message = json.dumps(response, ensure_ascii=False)
        error = document.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else error
            output.error = str(message or "gemini reported an error")
        return output
