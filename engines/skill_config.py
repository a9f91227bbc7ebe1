"""A skill's own engine defaults (R-SK9): read, stripped of what only the operator may set, merged.

A skill package may carry the settings its author tuned the engine with (model, reasoning
effort, ...), as `runner.json.engine_configs.<engine>` or the engine's conventional file under
`assets/`. They sit beneath the operator's settings: anything that would change authentication,
the provider endpoint, approvals, sandboxing or where files go is dropped with a warning, at any
depth, by the words of its key name (so `apiKey`, `base_url`, `sandbox_mode`, `model_providers`,
`shell_environment_policy` and `context.fileName` all go, while `model_max_output_tokens` stays).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A key is the operator's when any word of its name is one of these.
FORBIDDEN_WORDS = frozenset(
    {
        # authentication and credentials
        "auth", "oauth", "authentication", "login", "credential", "credentials", "key", "apikey", "token",
        "secret", "password", "helper",
        # the provider endpoint
        "provider", "providers", "url", "uri", "endpoint", "host", "proxy", "profile", "profiles",
        # approvals, sandboxing, permissions, trust
        "approval", "approvals", "approve", "sandbox", "sandboxing", "permission", "permissions", "trust",
        "trusted", "yolo", "bypass",
        # where files go, what runs, what the environment holds
        "dir", "directory", "directories", "path", "paths", "file", "files", "home", "cwd", "workdir", "workspace", "root",
        "env", "environment", "hook", "hooks", "notify", "command", "commands", "mcp", "servers", "log", "logs",
        "history",
    }
)  # fmt: skip
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


class SkillConfigError(ValueError):
    """The skill's engine config file exists but cannot be read (a warning, never a failure)."""


@dataclass
class SkillEngineDefaults:
    """What a skill contributes to one engine's configuration, and what was dropped on the way."""

    source: str | None = None  # package-relative path the settings came from
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "settings": self.settings}


def key_words(key: str) -> list[str]:
    """`model_reasoning_effort` → model, reasoning, effort; `selectedAuthType` → selected, auth, type."""
    return [word.lower() for word in _WORD.findall(key)]


def is_forbidden(key: str) -> bool:
    return any(word in FORBIDDEN_WORDS for word in key_words(key))


def strip_forbidden(settings: Mapping[str, Any], prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """The settings without operator-only keys (at any depth), and the dotted names dropped."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if is_forbidden(str(key)):
            dropped.append(name)
        elif isinstance(value, Mapping):
            inner, inner_dropped = strip_forbidden(value, f"{name}.")
            dropped += inner_dropped
            if inner:
                kept[key] = inner
        else:
            kept[key] = value
    return kept, dropped


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` wins, table by table: the operator's settings over the skill's."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _parse(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        value = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SkillConfigError(f"{exc}") from exc
    if not isinstance(value, dict):
        raise SkillConfigError("the top level must be an object/table")
    return value


def _inside(root: Path, relative: str) -> Path | None:
    """The regular file `relative` names inside the package, never through a link or outside it."""
    if not relative or Path(relative).is_absolute() or ".." in Path(relative).parts:
        return None
    path = root / relative
    current = root
    for part in Path(relative).parts:
        current = current / part
        if current.is_symlink():
            return None
    return path if path.is_file() else None


def _warning(message: str) -> dict[str, str]:
    return {"code": "SKILL_ENGINE_CONFIG_IGNORED", "message": message}


def load_skill_engine_defaults(
    skill_dir: Path, engine: str, declared: Any = None, conventional: str | None = None
) -> SkillEngineDefaults:
    """The skill's defaults for `engine`: `declared` (runner.json engine_configs.<engine>) first,
    else the `conventional` file (the adapter's skill_defaults_file); unreadable or operator-only
    parts become warnings."""
    result = SkillEngineDefaults()
    candidates = []
    if isinstance(declared, str) and declared.strip():
        candidates.append(declared.strip())
    elif declared is not None:
        result.warnings.append(_warning(f"engine_configs.{engine} must be a path inside the package; ignored"))
    if conventional and conventional not in candidates:
        candidates.append(conventional)
    for index, relative in enumerate(candidates):
        path = _inside(Path(skill_dir), relative)
        if path is None:
            if index == 0 and isinstance(declared, str):
                result.warnings.append(
                    _warning(f"engine_configs.{engine} {relative!r} is not a file inside the package; ignored")
                )
            continue
        try:
            raw = _parse(path)
        except SkillConfigError as exc:
            result.warnings.append(_warning(f"{relative} cannot be read ({exc}); ignored"))
            return result
        result.source = relative
        kept, dropped = strip_forbidden(raw)
        # JSON-safe (TOML dates become strings): the settings are stored with the run's options.
        result.settings = json.loads(json.dumps(kept, default=str))
        if dropped:
            result.warnings.append(
                _warning(
                    f"{relative}: settings only the operator may change were ignored: {', '.join(sorted(dropped))}"
                )
            )
        return result
    return result
