"""Engine configuration from settings (R-EN4, R-EN5, R-EN8), in the engine layer's own terms."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.conf import settings

from engines.registry import get_adapter
from engines.sandbox import sandbox_problem
from engines.types import EngineConfig, SandboxSettings

# The engine home of version and model probes, shared by every probe (no run's).
PROBE_HOME = "_probe"
# How many CLIs answer `--version` at once: most are Node programs that each take seconds of CPU
# to start, so one after another a form with seven engines waited for all of them in turn.
VERSION_PROBE_THREADS = 4


def engine_binary(engine: str) -> str:
    """Configured path, else the project-local install (`make engines`), else PATH."""
    configured = settings.SKILLRUNNER_ENGINES[engine]["binary"]
    if configured:
        return configured
    local = Path(settings.SKILLRUNNER_ENGINE_CLI_BIN_DIR) / engine
    if local.exists():
        return str(local)
    return shutil.which(engine) or engine


def engine_home(engine: str, home_name: str) -> Path:
    """`home_name` isolates the engine's home: one per run, so no run can read another's sessions."""
    return settings.DATA_DIR / "engine-homes" / engine / home_name


def engine_config(engine: str, home_name: str) -> EngineConfig:
    conf = settings.SKILLRUNNER_ENGINES[engine]
    return EngineConfig(
        binary=engine_binary(engine),
        home=engine_home(engine, home_name),
        base_url=conf["base_url"] or None,
        api_key=conf["api_key"] or None,
        default_model=conf["model"] or None,
        kill_grace_seconds=settings.SKILLRUNNER_KILL_GRACE_SECONDS,
        sandbox=sandbox_settings(),
        probe_dir=settings.DATA_DIR / "engine-probes",
    )


def detected_versions(engines: Iterable[str]) -> dict[str, str | None]:
    """Each engine's CLI version (None: not installed), the probes side by side. Answers are
    cached per binary (EngineAdapter.probe: in the process and under DATA_DIR), so only the first
    call of an installation waits."""
    names = list(dict.fromkeys(engines))

    def detect(engine: str) -> str | None:
        return get_adapter(engine).detect_version(engine_config(engine, PROBE_HOME))

    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(VERSION_PROBE_THREADS, len(names))) as pool:
        return dict(zip(names, pool.map(detect, names), strict=True))


def sandbox_settings() -> SandboxSettings:
    return SandboxSettings(
        mode=settings.SKILLRUNNER_SANDBOX,
        network=settings.SKILLRUNNER_SANDBOX_NETWORK,
        memory_mb=settings.SKILLRUNNER_SANDBOX_MEMORY_MB,
        max_processes=settings.SKILLRUNNER_SANDBOX_MAX_PROCESSES,
        max_file_mb=settings.SKILLRUNNER_SANDBOX_MAX_FILE_MB,
        max_open_files=settings.SKILLRUNNER_SANDBOX_MAX_OPEN_FILES,
        run_dir_mb=settings.SKILLRUNNER_SANDBOX_RUN_DIR_MB,
        tmp_mb=settings.SKILLRUNNER_SANDBOX_TMP_MB,
    )


def configured_secrets() -> tuple[str, ...]:
    """Values that must never appear in logs, events or bundles."""
    return tuple(conf["api_key"] for conf in settings.SKILLRUNNER_ENGINES.values() if conf["api_key"])


SANDBOX_OFF = "off: engines run unconfined"


def sandbox_check() -> str:
    """For /readyz: "ok", SANDBOX_OFF, or "error: <why turns cannot start>" (R-SB6)."""
    current = sandbox_settings()
    if current.mode == "off":
        return SANDBOX_OFF
    problem = sandbox_problem(current)
    return f"error: {problem}" if problem else "ok"


def sandbox_status() -> dict:
    """For GET /v1/engines: the sandbox's mode, network mode and whether it works here."""
    current = sandbox_settings()
    problem = sandbox_problem(current)
    return {"mode": current.mode, "network": current.network, "available": problem is None, "detail": problem}
