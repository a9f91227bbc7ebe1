"""Reusing the result of an identical earlier auto run (upstream clients expect `cache_hit`).

A run is identical when the skill package (by content), engine, effective model, input and
parameter are the same. Only the owner's own succeeded runs are reused, so nothing crosses users.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from skills.models import SkillVersion

from .engine_settings import engine_config
from .models import Run, RunStatus

CACHE_HOME = "_cache"


def cache_key(version: SkillVersion, engine: str, model: str | None, input: Any, parameter: Any) -> str:
    effective_model = model or engine_config(engine, CACHE_HOME).default_model or ""
    material = {
        "skill": version.package_sha256,
        "engine": engine,
        "model": effective_model,
        "input": input,
        "parameter": parameter,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def cached_run(owner, key: str) -> Run | None:
    return Run.objects.filter(owner=owner, cache_key=key, status=RunStatus.SUCCEEDED).order_by("-finished_at").first()
