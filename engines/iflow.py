"""iFlow CLI (``iflow -p``): plain text plus an ``<Execution Info>`` JSON block, resumable.

The CLI is no longer distributed (npm 404), so this adapter is built and tested against the
output format recorded by the upstream project (see engines/README.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .activity import NoActivity, usage_report
from .base import EngineAdapter, EngineOutput, argv_prompt, write_json_settings
from .provider_api import OPENAI_CHAT
from .types import EngineConfig, TurnRequest

_EXECUTION_INFO = re.compile(r"<Execution Info>(.*?)</Execution Info>", re.DOTALL)
_EXECUTION_INFO_BLOCK = re.compile(r"<Execution Info>.*?</Execution Info>", re.DOTALL)
_RESUMING = re.compile(r"^\s*Resuming session.*$", re.MULTILINE)
# Printed by the CLI's top-level handler before a stack trace; exit code alone is not reliable.
_CRASH = re.compile(r"An unexpected critical error occurred:?\s*(.*)")
DEFAULT_BASE_URL = "https://apis.iflow.cn/v1"


def _session_id(info_blocks: list[str]) -> str | None:
    for block in reversed(info_blocks):
        try:
            info = json.loads(block)
        except ValueError:
            match = re.search(r'"session-id"\s*:\s*"([^"]+)"', block)
            if match:
                return match.group(1)
            continue
        session = info.get("session-id") if isinstance(info, dict) else None
        if isinstance(session, str) and session:
            return session
    return None


def _usage(info_blocks: list[str]) -> dict[str, object] | None:
    """``tokenUsage {input, output}`` of the latest block that has it."""
    for block in reversed(info_blocks):
        try:
            info = json.loads(block)
        except ValueError:
            continue
        usage = info.get("tokenUsage") if isinstance(info, dict) else None
        if isinstance(usage, dict):
            return usage_report(usage.get("input"), None, usage.get("output"))
    return None


class IFlowAdapter(EngineAdapter):
    name = "iflow"
    skill_defaults_file = "assets/iflow_settings.json"
    skill_root = ".iflow"
    listing_order = 30
    known_models = ("glm-4.6", "qwen3-coder-plus", "kimi-k2")
    provider_id = "iflow"
    default_provider_url = DEFAULT_BASE_URL
    provider_api = OPENAI_CHAT

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return ["--yolo", "--thinking"]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        argv = [config.binary]
        if request.is_resume:
            # SPEC §7: the resumed session keeps its model, so no -m on resume turns.
            argv += ["--resume", str(request.session_handle), *self.auto_flags(config)]
        else:
            argv += [*self.auto_flags(config), *self.model_args(request, config)]
        return argv + ["-p", argv_prompt(request.prompt)]

    def skill_model(self, settings: dict[str, Any]) -> str | None:
        model = settings.get("modelName")
        return model if isinstance(model, str) and model else None

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        return {}  # iFlow reads its key and endpoint from $HOME/.iflow/settings.json

    def prepare_home(self, config: EngineConfig) -> None:
        super().prepare_home(config)
        settings: dict[str, object] = {
            "selectedAuthType": "iflow",
            "baseUrl": config.base_url or DEFAULT_BASE_URL,
            "disableAutoUpdate": True,
            "hideTips": True,
            "hideBanner": True,
        }
        if config.api_key:
            settings["apiKey"] = config.api_key
        model = self.default_model(config)
        if model:
            settings["modelName"] = model
        write_json_settings(self.home_dir(config) / ".iflow" / "settings.json", settings, config)

    def activity_parser(self) -> NoActivity:
        # Plain text with no structure while it runs: no activity, only the final answer.
        return NoActivity()

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        # The block normally goes to stderr but has been seen on stdout as well.
        blocks = _EXECUTION_INFO.findall(stderr) + _EXECUTION_INFO.findall(stdout)
        output = EngineOutput(session_handle=_session_id(blocks), usage=_usage(blocks))
        segments = [_RESUMING.sub("", part).strip() for part in _EXECUTION_INFO_BLOCK.split(stdout)]
        output.final_message = next((part for part in reversed(segments) if part), "")
        crash = _CRASH.search(stdout) or _CRASH.search(stderr)
        if crash:
            output.error = "iflow crashed: " + (crash.group(1).strip() or "see stderr")
        return output
