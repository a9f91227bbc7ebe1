"""Engine configuration from settings (R-EN4, R-EN5, R-EN8), in the engine layer's own terms."""

from __future__ import annotations

import shutil
from pathlib import Path

from django.conf import settings

from engines.types import EngineConfig


def engine_binary(engine: str) -> str:
    """Configured path, else the project-local install (`make engines`), else PATH."""
    configured = settings.SKILLRUNNER_ENGINES[engine]["binary"]
    if configured:
        return configured
    local = Path(settings.SKILLRUNNER_ENGINE_CLI_BIN_DIR) / engine
    if local.exists():
        return str(local)
    return shutil.which(engine) or engine


def engine_config(engine: str, home_name: str) -> EngineConfig:
    """`home_name` isolates the engine's home: one per run, so no run can read another's sessions."""
    conf = settings.SKILLRUNNER_ENGINES[engine]
    return EngineConfig(
        binary=engine_binary(engine),
        home=settings.DATA_DIR / "engine-homes" / engine / home_name,
        base_url=conf["base_url"] or None,
        api_key=conf["api_key"] or None,
        default_model=conf["model"] or None,
        kill_grace_seconds=settings.SKILLRUNNER_KILL_GRACE_SECONDS,
    )


def configured_secrets() -> tuple[str, ...]:
    """Values that must never appear in logs, events or bundles."""
    return tuple(conf["api_key"] for conf in settings.SKILLRUNNER_ENGINES.values() if conf["api_key"])
