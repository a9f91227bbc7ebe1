"""Qwen Code (``qwen -p``), resumable by session id from the same working directory.

A fork of Gemini CLI: the same command line and a user-level ``settings.json``
(engines/gemini_family.py). Its ``--output-format stream-json`` prints Claude Code's event
shapes (engines/stream_json.py). It talks OpenAI Chat Completions to the configured endpoint
(auth type ``openai``: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``); facts measured on 0.24.4 are in
engines/README.md and docs/engines.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .activity import tokens, usage_report
from .base import EngineOutput, write_json_settings
from .gemini_family import GeminiFamilyAdapter
from .provider_api import OPENAI_CHAT
from .stream_json import StreamJsonActivity, stream_json_output
from .types import EngineConfig

# Alibaba Cloud Model Studio's OpenAI-compatible endpoint, where the Qwen models live. The CLI's
# own default for auth type `openai` is api.openai.com; the adapter always names its endpoint, so
# the CLI and a `provider`-mode sandbox agree on where the model is.
DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"

# The user-level settings.json in QWEN_HOME (R-EN8). The auth type makes the CLI read
# OPENAI_API_KEY and OPENAI_BASE_URL; chat recording is what --resume reads back; the background
# memory agents would send extra model requests after every turn and write memory files; the
# sleep inhibitor would start `systemd-inhibit` for every model call.
SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
    "general": {"enableAutoUpdate": False, "chatRecording": True, "preventSystemSleep": False},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    # The CLI makes up to 7 attempts at a failed request by itself, with backoff; the OpenAI SDK
    # inside it need not retry each of them again.
    "model": {"generationConfig": {"maxRetries": 0}},
}


class QwenActivity(StreamJsonActivity):
    file_tools = ("write_file", "edit", "notebook_edit")
    plan_tool = "todo_write"
    summary_keys = ("command", "file_path", "notebook_path", "path", "pattern", "url", "query", "description")


def _usage(events: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any] | None:
    """This turn's tokens: the sum over its model calls. The result event's `usage` would not do:
    a resumed session counts its earlier turns there too. Each call's usage rides on the last
    assistant message it printed (the others carry zeros); `input_tokens` includes cached input."""
    messages = [event.get("message") for event in events if event.get("type") == "assistant"]
    calls = [m["usage"] for m in messages if isinstance(m, dict) and isinstance(m.get("usage"), dict)]
    if not calls:
        return None

    def total(key: str) -> int | None:
        counts = [count for usage in calls if (count := tokens(usage.get(key))) is not None]
        return sum(counts) if counts else None

    return usage_report(total("input_tokens"), total("cache_read_input_tokens"), total("output_tokens"))


class QwenAdapter(GeminiFamilyAdapter):
    name = "qwen"
    skill_defaults_file = "assets/qwen_config.json"  # upstream's name for it
    skill_root = ".qwen"
    # It loads the .env of its working directory, and finds project skills in .agents/skills too.
    extra_control_names = (".env", ".agents")
    listing_order = 50
    known_models = ("qwen3-coder-plus", "qwen3-coder-next", "qwen3.6-plus")
    provider_id = "dashscope"
    efforts = ("low", "medium", "high", "xhigh", "max")
    default_provider_url = DEFAULT_BASE_URL
    provider_api = OPENAI_CHAT

    def prompt_argument(self, prompt: str) -> str:
        # A prompt starting with "/" would run one of the CLI's slash commands (a reply "/clear"
        # empties the session); a leading space makes it plain text, as it does for a "-".
        return " " + prompt if prompt.startswith(("/", "-")) else prompt

    def effort_settings(self, effort: str) -> dict[str, Any]:
        return {"model": {"reasoningEffort": effort}}

    def qwen_home(self, config: EngineConfig) -> Path:
        """QWEN_HOME: settings.json, and the sessions under projects/<cwd>/chats/."""
        return Path(config.home) / ".qwen"

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        env = {
            "QWEN_HOME": str(self.qwen_home(config)),
            "OPENAI_BASE_URL": config.base_url or DEFAULT_BASE_URL,
            # The CLI otherwise re-spawns itself (a third node process per turn).
            "QWEN_CODE_NO_RELAUNCH": "1",
            # Its stderr notice that --yolo runs without the CLI's own sandbox: this one confines it.
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }
        if config.api_key:
            env["OPENAI_API_KEY"] = config.api_key
        return env

    def prepare_home(self, config: EngineConfig) -> None:
        super().prepare_home(config)
        write_json_settings(self.qwen_home(config) / "settings.json", SETTINGS, config)

    def activity_parser(self) -> QwenActivity:
        return QwenActivity()

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        return stream_json_output(stdout, self.name, _usage)
