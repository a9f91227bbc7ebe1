"""Kilo (``kilo run --format json``), OpenCode's fork, resumable by session id; see opencode_family."""

from __future__ import annotations

from .opencode_family import OpenCodeFamilyAdapter
from .types import EngineConfig


class KiloAdapter(OpenCodeFamilyAdapter):
    name = "kilo"
    skill_defaults_file = "assets/kilo_config.json"
    skill_root = ".kilo"
    extra_control_names = (".kilocode",)  # Kilo's older name for its project folder
    listing_order = 55
    env_prefix = "KILO"
    app_name = "kilo"
    plugin_package = "@kilocode/plugin"
    primary_agent = "code"

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        return {
            **self.shared_env(config),
            # Kilo's own services, none of which a run needs: its telemetry (PostHog), a shared
            # background daemon, session upload and presence on Kilo's servers, code indexing.
            "KILO_TELEMETRY_LEVEL": "off",
            "KILO_NO_DAEMON": "1",
            "KILO_DISABLE_SESSION_INGEST": "1",
            "KILO_DISABLE_PRESENCE": "1",
            "KILO_DISABLE_CODEBASE_INDEXING": "1",
            # Retries of a failing endpoint (0 would mean OpenCode's 5, with backoff up to 30 s).
            "KILO_SESSION_RETRY_LIMIT": "2",
        }
