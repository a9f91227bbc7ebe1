"""Which engines a run can use here, for the new-run form (issue 30): an engine is offered when
its CLI is installed, the operator configured it and the agent sandbox works; the others are
shown with the reason they cannot run, so no one starts a run that fails after it starts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from django.conf import settings

from engines.registry import get_adapter
from skills.models import SkillVersion

from .config import PROBE_HOME, detected_versions, engine_config, sandbox_status
from .skill_runtime import run_engine_config, skill_engine_defaults

# What configures an engine (SKILLRUNNER_<ENGINE>_<NAME>): a provider key or endpoint, or a CLI
# of the operator's own choosing, which brings its own setup. Without any, the CLI has no
# credentials: its home is the service's, made fresh per run (R-EN5).
CONFIGURING = ("api_key", "base_url", "binary")


@dataclass(frozen=True)
class EngineChoice:
    engine: str
    usable: bool
    reason: str  # why it cannot run here; empty when it can
    default_model: str | None  # the model a run without one gets: the skill's, else the operator's


def engine_choice(engine: str, version: SkillVersion | None = None) -> EngineChoice:
    adapter = get_adapter(engine)
    config = engine_config(engine, PROBE_HOME)
    if version is not None:
        config = dataclasses.replace(config, skill_settings=skill_engine_defaults(version, engine).settings)
    default_model = adapter.default_model(config)
    reason = ""
    if adapter.detect_version(config) is None:
        reason = f"not installed here: its CLI ({config.binary}) was not found"
    elif not any(settings.SKILLRUNNER_ENGINES[engine][name] for name in CONFIGURING):
        reason = f"not configured: the operator sets SKILLRUNNER_{engine.upper()}_API_KEY (or _BASE_URL)"
    else:
        sandbox = sandbox_status()
        if not sandbox["available"]:
            reason = f"the agent sandbox does not work here: {sandbox['detail']}"
    return EngineChoice(engine, not reason, reason, default_model)


def engine_choices(version: SkillVersion) -> list[EngineChoice]:
    """The skill's engines, in its order, each with whether it can run here."""
    engines = version.effective_engines
    detected_versions(engines)  # their CLIs probed side by side; engine_choice reads the cached answers
    return [engine_choice(engine, version) for engine in engines]


def catalogued_models(engine: str) -> list[str]:
    """The models the engine's catalogue lists (GET /v1/engines/{engine}/models): its own and
    the operator's default, the ones a run may name (R-UP9)."""
    return [model["id"] for model in get_adapter(engine).models(engine_config(engine, PROBE_HOME))]


def run_model(run) -> str | None:
    """The model `run` uses: its own, else the default its turns get (the skill's as recorded
    with the run, else the operator's); None when the CLI decides."""
    if run.model:
        return run.model
    return get_adapter(run.engine).default_model(run_engine_config(run.engine, PROBE_HOME, run.runtime_options))
