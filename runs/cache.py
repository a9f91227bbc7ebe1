"""Reusing the result of an identical earlier auto run (upstream clients expect `cache_hit`), R-OP9.

A run is identical when everything that can change the answer is the same: the skill package
(by content), the engine, its CLI version, the provider base URL, the effective model, the input
(uploaded files by content), the parameter and the runtime options that affect execution. Only
the owner's own succeeded runs are reused, so nothing crosses users.

A reused result never points into the earlier run's directory: its artifacts are copied into the
new run (read through runs.runfiles, so nothing an agent linked is copied) and paths in `data`
are made run-relative. The copy can be large, so it happens outside any database transaction and
within SKILLRUNNER_CACHE_MAX_COPY_BYTES (R-FS2); past that the run simply executes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from django.conf import settings

from enginehost.config import engine_config
from engines.registry import get_adapter
from skills.models import SkillVersion

from . import runfiles
from .models import Run, RunStatus

logger = logging.getLogger(__name__)

CACHE_HOME = "_cache"
# Options that cannot change an auto run's answer: only interactive runs wait, and `no_cache`
# only decides whether to look. Every other option (a new one too) is part of the key.
OPTIONS_OUTSIDE_KEY = frozenset({"no_cache", "session_timeout_sec", "interactive_require_user_reply"})


def cache_key(
    version: SkillVersion,
    engine: str,
    model: str | None,
    input: Any,
    parameter: Any,
    runtime_options: dict[str, Any],
    uploads_digest: str = "",
) -> str:
    """The key of a run (R-OP9); `runtime_options` are the effective ones (EffectiveOptions.as_dict)."""
    config = engine_config(engine, CACHE_HOME)
    material = {
        "skill": version.package_sha256,
        "engine": engine,
        "cli_version": get_adapter(engine).detect_version(config) or "",
        "base_url": config.base_url or "",
        "model": model or config.default_model or "",
        "input": input,
        "uploads": uploads_digest,
        "parameter": parameter,
        "options": {k: v for k, v in runtime_options.items() if k not in OPTIONS_OUTSIDE_KEY},
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def uploads_digest(run_dir: Path) -> str:
    """The uploaded input files by name and content (read as any run file: links are not files)."""
    digest = hashlib.sha256()
    for path in runfiles.list_files(run_dir, "uploads"):
        source = runfiles.open_file(run_dir, path)
        if source is None:
            continue
        with source:
            digest.update(path.encode() + b"\0" + hashlib.file_digest(source, "sha256").digest())
    return digest.hexdigest()


def is_cacheable(runtime_options: dict[str, Any]) -> bool:
    """Only auto runs are reused (an interactive answer depends on the replies), unless `no_cache`."""
    return runtime_options.get("execution_mode") == "auto" and not runtime_options.get("no_cache")


def cached_run(owner, key: str) -> Run | None:
    """The owner's latest earlier run whose result a run with `key` may reuse (creating a run
    looks it up with its admission checks: runs.services.admission._admission_sql)."""
    earlier = Run.objects.filter(owner=owner, cache_key=key, status=RunStatus.SUCCEEDED, files_removed_at__isnull=True)
    return earlier.order_by("-finished_at").first()


def copy_cached_result(source: Run, run_dir: Path) -> dict[str, Any] | None:
    """The source run's result for a new run in `run_dir`, its artifacts copied there first.

    None (and no artifact left in `run_dir`) when they cannot all be copied within the size cap or
    are gone: the new run then executes instead. Call outside any transaction (R-FS2).
    """
    result = source.result or {}
    artifacts = list(result.get("artifacts") or [])
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        copied = runfiles.copy_files(source.run_dir, run_dir, artifacts, settings.SKILLRUNNER_CACHE_MAX_COPY_BYTES)
    except (runfiles.CopyTooLarge, OSError) as exc:
        logger.info("run %s not reused from the cache: %s", source.pk, exc)
        copied = None
    if copied != artifacts:
        for path in artifacts:  # the run dir is the new run's own, untouched by any agent yet
            if runfiles.parts(path):
                (run_dir / path).unlink(missing_ok=True)
        return None
    return {**result, "data": _rebased(result.get("data"), source.run_dir, run_dir)}


def _rebased(value: Any, source_dir: Path, run_dir: Path) -> Any:
    """`value` with paths into the source run made run-relative, other mentions of it pointed here."""
    if isinstance(value, str):
        relative = runfiles.run_relative(source_dir, value) if value.startswith(f"{source_dir}/") else None
        return relative or value.replace(str(source_dir), str(run_dir))
    if isinstance(value, list):
        return [_rebased(item, source_dir, run_dir) for item in value]
    if isinstance(value, dict):
        return {key: _rebased(item, source_dir, run_dir) for key, item in value.items()}
    return value
