"""What a skill package in today's format adds to its runs (R-SK7, R-SK8, R-SK9).

Its engine defaults are read once, when the run is created, and kept with the run's effective
options (so the admin shows them and a later skill update changes nothing); its prompt template
and its dependency environment are prepared by the worker before the first turn.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from engines.prompt import prompt_template, render_prompt_template
from engines.registry import get_adapter
from engines.skill_config import SkillEngineDefaults, load_skill_engine_defaults
from engines.types import EngineConfig
from skills.models import SkillVersion
from skills.packages import SkillPackageError

from .config import engine_config
from .dependencies import DependencyBuildError, DependencyEnvironment, dependency_warning, prepare_environment

# Where a run's effective options keep the skill's engine defaults.
ENGINE_DEFAULTS_KEY = "engine_config"


def skill_engine_defaults(version: SkillVersion, engine: str) -> SkillEngineDefaults:
    """`runner.json.engine_configs.<engine>`, else the engine's conventional file (R-SK9)."""
    declared = version.manifest.get("engine_configs")
    return load_skill_engine_defaults(
        version.path,
        engine,
        declared.get(engine) if isinstance(declared, dict) else None,
        get_adapter(engine).skill_defaults_file,
    )


def run_engine_config(engine: str, home_name: str, runtime_options: dict[str, Any]) -> EngineConfig:
    """The operator's engine config with the run's recorded skill defaults beneath it."""
    recorded = runtime_options.get(ENGINE_DEFAULTS_KEY) or {}
    settings = recorded.get("settings") if isinstance(recorded, dict) else None
    return dataclasses.replace(engine_config(engine, home_name), skill_settings=dict(settings or {}))


def template_body(
    version: SkillVersion, engine: str, inputs: dict[str, Any], parameters: dict[str, Any], files: dict[str, Path]
) -> str | None:
    """The skill's own first-turn body (R-SK8), or None for the generic one.

    Raises engines.prompt.PromptTemplateError when the template cannot be rendered.
    """
    template = prompt_template(version.manifest, engine)
    if template is None:
        return None
    return render_prompt_template(template, inputs, parameters, files)


def dependency_environment(version: SkillVersion) -> tuple[DependencyEnvironment | None, dict[str, str] | None]:
    """The ready environment of the skill's runtime.dependencies (R-SK7), or the warning saying why not."""
    try:
        dependencies = version.dependencies
    except SkillPackageError as exc:  # installed before the list was checked at install
        return None, dependency_warning(DependencyBuildError(exc.message))
    if not dependencies:
        return None, None
    try:
        return prepare_environment(dependencies), None
    except DependencyBuildError as exc:
        return None, dependency_warning(exc)
