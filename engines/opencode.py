"""OpenCode (``opencode run --format json``), resumable by session id; see opencode_family."""

from __future__ import annotations

from .opencode_family import OpenCodeFamilyAdapter
from .types import EngineConfig


class OpenCodeAdapter(OpenCodeFamilyAdapter):
    name = "opencode"
    skill_defaults_file = "assets/opencode_config.json"
    skill_root = ".opencode"
    listing_order = 45
    env_prefix = "OPENCODE"
    app_name = "opencode"
    plugin_package = "@opencode-ai/plugin"
    primary_agent = "build"

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        return self.shared_env(config)
