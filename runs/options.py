"""Runtime options of a run (R-AD4): one whitelist, strict types, skill defaults underneath."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from engines.types import ExecutionMode
from kernel.errors import ApplicationError

BOOL_KEYS = ("interactive_require_user_reply", "interactive_auto_reply", "no_cache")
POSITIVE_INT_KEYS = ("session_timeout_sec", "interactive_reply_timeout_sec", "hard_timeout_seconds", "max_tokens")
KNOWN_KEYS = ("execution_mode", *BOOL_KEYS, *POSITIVE_INT_KEYS, "max_repair_rounds")
# Upstream's options this service accepts from its clients but does not act on (README lists
# them), with the type upstream gives each: dropped with a RUNTIME_OPTION_IGNORED warning on the
# run, never silently (upstream's clients send some of them with every run).
IGNORED_KEYS: dict[str, type] = {
    "workspace": dict,
    "env": dict,
    "collect_skill_run_feedback": bool,
    "preamble_prompt": str,
}
DEFAULT_REPAIR_ROUNDS = 2
# A run's `effort` that asks for none in particular: the engine's and the skill's own setting.
DEFAULT_EFFORT = "default"


@dataclass(frozen=True)
class EffectiveOptions:
    execution_mode: ExecutionMode
    interactive_require_user_reply: bool
    session_timeout_sec: int
    hard_timeout_seconds: int
    no_cache: bool
    max_repair_rounds: int
    max_tokens: int | None  # the run's own token budget, below the operator's (R-SB9)

    @classmethod
    def with_defaults(cls, chosen: dict[str, Any]) -> EffectiveOptions:
        """`chosen` (checked, canonical names) completed with the service defaults. Also reads a
        run's stored options, so a key an older row lacks takes today's default."""
        return cls(
            execution_mode=chosen.get("execution_mode", "auto"),
            interactive_require_user_reply=chosen.get("interactive_require_user_reply", True),
            session_timeout_sec=chosen.get("session_timeout_sec", settings.SKILLRUNNER_DEFAULT_SESSION_TIMEOUT),
            hard_timeout_seconds=chosen.get("hard_timeout_seconds", settings.SKILLRUNNER_DEFAULT_HARD_TIMEOUT),
            no_cache=chosen.get("no_cache", False),
            max_repair_rounds=chosen.get(
                "max_repair_rounds", min(DEFAULT_REPAIR_ROUNDS, settings.SKILLRUNNER_MAX_REPAIR_ROUNDS)
            ),
            max_tokens=chosen.get("max_tokens"),
        )

    def as_dict(self) -> dict[str, Any]:
        """As stored and shown: a limit the run did not ask for is not there (the operator's applies)."""
        return {key: value for key, value in self.__dict__.items() if value is not None}


def _invalid(key: str, message: str) -> ApplicationError:
    return ApplicationError("RUNTIME_OPTION_INVALID", f"runtime_options.{key}: {message}", key=key)


def _upper_bounds() -> dict[str, int]:
    """Timeouts a run may ask for (R-FS1): a long wait holds a slot, a long turn a worker; and
    the operator's token budget, which a run may only lower (R-SB9)."""
    session = settings.SKILLRUNNER_MAX_SESSION_TIMEOUT
    bounds = {
        "hard_timeout_seconds": settings.SKILLRUNNER_MAX_HARD_TIMEOUT,
        "session_timeout_sec": session,
        "interactive_reply_timeout_sec": session,
    }
    if settings.SKILLRUNNER_RUN_MAX_TOKENS:
        bounds["max_tokens"] = settings.SKILLRUNNER_RUN_MAX_TOKENS
    return bounds


def _check(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(KNOWN_KEYS))
    if unknown:
        names = ", ".join(unknown)
        raise ApplicationError(
            "RUNTIME_OPTION_INVALID",
            f"runtime_options.{names}: unknown option{'s' if len(unknown) > 1 else ''} (known: {', '.join(KNOWN_KEYS)})",
            key=unknown[0],
            unknown=unknown,
        )
    mode = options.get("execution_mode")
    if mode is not None and mode not in ("auto", "interactive"):
        raise _invalid("execution_mode", 'must be "auto" or "interactive"')
    for key in BOOL_KEYS:
        if key in options and not isinstance(options[key], bool):
            raise _invalid(key, "must be a boolean")
    for key in POSITIVE_INT_KEYS:
        if key in options:
            value = options[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise _invalid(key, "must be an integer greater than 0")
    for key, bound in _upper_bounds().items():
        if options.get(key, 0) > bound:
            raise _invalid(key, f"must be at most {bound}")
    if "max_repair_rounds" in options:
        value, bound = options["max_repair_rounds"], settings.SKILLRUNNER_MAX_REPAIR_ROUNDS
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound:
            raise _invalid("max_repair_rounds", f"must be an integer from 0 (no repair) to {bound}")
    return options


# Newer clients' name → (the seed's name, how a value translates).
ALIASES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "interactive_auto_reply": ("interactive_require_user_reply", lambda value: not value),
    "interactive_reply_timeout_sec": ("session_timeout_sec", lambda value: value),
}


def _merge_aliases(options: dict[str, Any]) -> dict[str, Any]:
    """Aliases mean the same as the seed's names; a contradicting pair is refused."""
    merged = dict(options)
    for alias, (canonical, translate) in ALIASES.items():
        if alias not in merged:
            continue
        implied = translate(merged.pop(alias))
        if canonical in merged and merged[canonical] != implied:
            raise ApplicationError(
                "RUNTIME_OPTION_CONFLICT", f"{alias} and {canonical} contradict each other", key=alias
            )
        merged[canonical] = implied
    return merged


def resolve_options(requested: Any, skill_defaults: dict[str, Any]) -> tuple[EffectiveOptions, list[dict[str, str]]]:
    """Request values over the skill's runtime.default_options; bad skill defaults are dropped with a warning."""
    if requested is None:
        requested = {}
    if not isinstance(requested, dict):
        raise ApplicationError("RUNTIME_OPTION_INVALID", "runtime_options must be an object", key="runtime_options")
    warnings: list[dict[str, str]] = []
    for key, kind in IGNORED_KEYS.items():
        if key not in requested:
            continue
        if not isinstance(requested[key], kind):
            raise _invalid(key, f"must be {'an object' if kind is dict else f'a {kind.__name__}'}")
        warnings.append(
            {"code": "RUNTIME_OPTION_IGNORED", "message": f"runtime_options.{key} has no effect on this service"}
        )
    requested = _merge_aliases(_check({key: value for key, value in requested.items() if key not in IGNORED_KEYS}))
    defaults: dict[str, Any] = {}
    for key, value in skill_defaults.items():
        try:
            defaults.update(_merge_aliases(_check({key: value})))
        except ApplicationError as exc:
            warnings.append({"code": "SKILL_RUNTIME_DEFAULT_OPTION_IGNORED", "message": exc.message})
    return EffectiveOptions.with_defaults({**defaults, **requested}), warnings
