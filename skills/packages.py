"""Reading and validating a skill package folder (R-SK1–R-SK4). No database, no side effects."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import validators
from jsonschema.exceptions import SchemaError
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from engines.registry import ENGINE_NAMES
from kernel.errors import ApplicationError

EXECUTION_MODES = ("auto", "interactive")
SCHEMA_KEYS = ("input", "parameter", "output")
SKILL_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.DOTALL)
EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}
UNSAFE_PATTERN_CHARACTERS = re.compile(r"[\x00-\x1f\x7f\\]")
UNSAFE_NAME_CHARACTERS = re.compile(r"[/\x00-\x1f\x7f\\]")


class SkillPackageError(ApplicationError):
    """A skill package refused (R-SK1–R-SK4)."""


@dataclass
class SkillPackage:
    skill_id: str
    version: str
    name: str
    description: str
    manifest: dict[str, Any]
    schemas: dict[str, dict[str, Any]]
    engines: list[str]
    unsupported_engines: list[str]
    effective_engines: list[str]
    execution_modes: list[str]
    max_attempt: int | None
    artifacts: list[dict[str, Any]]
    root: Path
    warnings: list[dict[str, str]] = field(default_factory=list)

    def fingerprint(self) -> str:
        """Hash of every file in the package, so identical re-installs can be recognised."""
        digest = hashlib.sha256()
        for path in sorted(p for p in self.root.rglob("*") if p.is_file()):
            digest.update(path.relative_to(self.root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
        return digest.hexdigest()


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID" if what == "runner.json" else "SKILL_SCHEMA_INVALID", f"{what}: {exc}"
        ) from exc


def _front_matter(skill_md: Path) -> dict[str, Any]:
    try:
        text = skill_md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillPackageError("SKILL_PACKAGE_INVALID", f"SKILL.md cannot be read: {exc}") from exc
    match = FRONT_MATTER.match(text)
    if not match:
        raise SkillPackageError("SKILL_PACKAGE_INVALID", "SKILL.md must start with a YAML front matter block (---)")
    try:
        data = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise SkillPackageError("SKILL_PACKAGE_INVALID", f"SKILL.md front matter is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"].strip():
        raise SkillPackageError("SKILL_PACKAGE_INVALID", "SKILL.md front matter needs a non-empty `name`")
    return data


def _string_list(manifest: dict[str, Any], key: str) -> list[str]:
    value = manifest.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SkillPackageError("SKILL_MANIFEST_INVALID", f"runner.json `{key}` must be a list of strings")
    unknown = sorted(set(value) - set(ENGINE_NAMES))
    if unknown:
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID",
            f"runner.json `{key}` names unknown engines: {', '.join(unknown)} (known: {', '.join(ENGINE_NAMES)})",
        )
    return list(dict.fromkeys(value))


def _load_schema(root: Path, declared: Any, key: str, warnings: list[dict[str, str]]) -> dict[str, Any] | None:
    """Declared path first, then the conventional assets/<key>.schema.json (upstream's resolution)."""
    candidates = []
    if isinstance(declared, str) and declared.strip():
        candidates.append(declared.strip())
    fallback = f"assets/{key}.schema.json"
    if fallback not in candidates:
        candidates.append(fallback)
    for index, relative in enumerate(candidates):
        path = (root / relative).resolve()
        if not path.is_relative_to(root.resolve()) or not path.is_file():
            continue
        if index > 0:
            warnings.append(
                {
                    "code": "SKILL_SCHEMA_PATH_FALLBACK",
                    "message": f"schemas.{key} `{declared}` not found; using {relative}",
                }
            )
        schema = _read_json(path, f"{key} schema ({relative})")
        if not isinstance(schema, dict):
            raise SkillPackageError("SKILL_SCHEMA_INVALID", f"{key} schema must be a JSON object")
        try:
            validators.validator_for(schema).check_schema(schema)
        except SchemaError as exc:
            raise SkillPackageError(
                "SKILL_SCHEMA_INVALID", f"{key} schema is not a valid JSON Schema: {exc.message}"
            ) from exc
        if schema.get("type", "object") != "object":
            raise SkillPackageError("SKILL_SCHEMA_INVALID", f"{key} schema must describe an object (type: object)")
        return schema
    return None


def _safe_name(name: Any) -> bool:
    """One path component the service can create under artifacts/ (R-SB7): no separators, no
    `.`/`..`, no control characters."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and len(name.encode()) <= 255
        and not UNSAFE_NAME_CHARACTERS.search(name)
    )


def _safe_pattern(pattern: Any) -> bool:
    """A runner.json artifact pattern: relative, no `..` component, no control characters (R-SB7)."""
    return (
        isinstance(pattern, str)
        and bool(pattern)
        and not pattern.startswith("/")
        and ".." not in pattern.split("/")
        and not UNSAFE_PATTERN_CHARACTERS.search(pattern)
    )


# Output-schema x-type values that declare files (R-OU1) and how their value is read.
ARTIFACT_KINDS = {"artifact": "file", "file": "file", "artifact-manifest": "manifest"}


def artifacts_of(manifest: dict[str, Any], output_schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Declared files: output-schema properties with an artifact x-type (R-OU1), plus runner.json artifacts.

    A property with `x-filename` names its file under artifacts/; one without it carries the path
    of a file of the agent's choosing (`filename` None). `kind` "manifest" is an artifact-manifest:
    a JSON object {label: path} whose files all count. A name or pattern that could point outside
    artifacts/ makes the package invalid (R-SB7).
    """
    found: dict[str, dict[str, Any]] = {}
    required = set(output_schema.get("required") or [])
    for prop, spec in (output_schema.get("properties") or {}).items():
        if not isinstance(spec, dict) or spec.get("x-type") not in ARTIFACT_KINDS:
            continue
        filename = spec.get("x-filename")
        if filename is not None and not _safe_name(filename):
            raise SkillPackageError(
                "SKILL_SCHEMA_INVALID",
                f"output property {prop!r}: x-filename {filename!r} must be one plain file name "
                "(no '/', '\\', '..' or control characters)",
            )
        found[filename or f"property:{prop}"] = {
            "role": spec.get("x-role") or prop,
            "filename": filename,
            "required": prop in required,
            "property": prop,
            "kind": ARTIFACT_KINDS[spec["x-type"]],
        }
    for entry in manifest.get("artifacts") or []:
        if isinstance(entry, dict) and "pattern" in entry and not _safe_pattern(entry["pattern"]):
            raise SkillPackageError(
                "SKILL_MANIFEST_INVALID",
                f"runner.json artifact pattern {entry['pattern']!r} must be a relative path without '..' "
                "or control characters",
            )
        if isinstance(entry, dict) and isinstance(entry.get("pattern"), str) and entry["pattern"] not in found:
            pattern = entry["pattern"]
            if "/" in pattern or any(ch in pattern for ch in "*?["):
                continue  # globs and nested paths are listed, not required
            found[pattern] = {
                "role": str(entry.get("role") or pattern),
                "filename": pattern,
                "required": bool(entry.get("required", False)),
                "property": None,
                "kind": "file",
            }
    return list(found.values())


def runtime_dependencies(manifest: dict[str, Any]) -> list[str]:
    """`runtime.dependencies` (R-SK7): package requirements from the package index, such as
    `pypdf>=4`; direct URLs and local paths are refused, environments are built from the index only."""
    runtime = manifest.get("runtime")
    value = runtime.get("dependencies") if isinstance(runtime, dict) else None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID", "runner.json `runtime.dependencies` must be a list of strings"
        )
    for item in value:
        try:
            requirement = Requirement(item)
        except InvalidRequirement as exc:
            raise SkillPackageError(
                "SKILL_MANIFEST_INVALID", f"runner.json `runtime.dependencies`: {item!r} is not a requirement: {exc}"
            ) from exc
        if requirement.url:
            raise SkillPackageError(
                "SKILL_MANIFEST_INVALID",
                f"runner.json `runtime.dependencies`: {item!r} names a URL; only packages from the index are allowed",
            )
    return [item.strip() for item in value]


# The version a package for one run only gets when its runner.json names none (R-UP8), as upstream.
UNVERSIONED = "1.0.0"


def load_skill_dir(root: Path, *, legacy: bool = False, versioned: bool = True) -> SkillPackage:
    """Validate the package in `root`. `legacy` accepts a missing execution_modes (R-SK4); without
    `versioned` (a package for one run) a missing version is taken as UNVERSIONED."""
    root = root.resolve()
    skill_md = root / "SKILL.md"
    runner_json = root / "assets" / "runner.json"
    missing = [str(p.relative_to(root)) for p in (skill_md, runner_json) if not p.is_file()]
    if missing:
        raise SkillPackageError("SKILL_PACKAGE_INVALID", f"package is missing {', '.join(missing)}")
    front = _front_matter(skill_md)
    manifest = _read_json(runner_json, "runner.json")
    if not isinstance(manifest, dict):
        raise SkillPackageError("SKILL_MANIFEST_INVALID", "runner.json must be a JSON object")
    skill_id = manifest.get("id")
    if not isinstance(skill_id, str) or not SKILL_ID_PATTERN.match(skill_id):
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID", "runner.json `id` must be a simple name (letters, digits, . _ -)"
        )
    if not (root.name == skill_id == front["name"]):
        raise SkillPackageError(
            "SKILL_IDENTITY_MISMATCH",
            f"folder name ({root.name}), runner.json id ({skill_id}) and SKILL.md name ({front['name']}) must be equal",
        )
    version = manifest.get("version", None if versioned else UNVERSIONED)
    if not isinstance(version, str):
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID", 'runner.json `version` is required (a string such as "1.0.0")'
        )
    try:
        Version(version)
    except InvalidVersion as exc:
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID", f"runner.json `version` {version!r} is not a valid version"
        ) from exc

    warnings: list[dict[str, str]] = []
    modes = manifest.get("execution_modes")
    if modes is None:
        if not legacy:
            raise SkillPackageError(
                "SKILL_EXECUTION_MODES_MISSING",
                "runner.json must declare `execution_modes` (a non-empty list of auto/interactive)",
            )
        modes = ["auto"]
        warnings.append(
            {
                "code": "SKILL_EXECUTION_MODES_DEFAULTED",
                "message": 'runner.json has no execution_modes; loaded as ["auto"] (deprecated)',
            }
        )
    if not isinstance(modes, list) or not modes or not all(m in EXECUTION_MODES for m in modes):
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID", 'runner.json `execution_modes` must be a non-empty list of "auto"/"interactive"'
        )

    engines = _string_list(manifest, "engines")
    unsupported = _string_list(manifest, "unsupported_engines")
    overlap = sorted(set(engines) & set(unsupported))
    if overlap:
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID", f"engines and unsupported_engines overlap: {', '.join(overlap)}"
        )
    effective = [e for e in (engines or list(ENGINE_NAMES)) if e not in unsupported]
    if not effective:
        raise SkillPackageError(
            "SKILL_MANIFEST_INVALID", "no engine is left after removing unsupported_engines (R-SK3)"
        )

    max_attempt = manifest.get("max_attempt")
    if max_attempt is not None and (
        not isinstance(max_attempt, int) or isinstance(max_attempt, bool) or max_attempt < 1
    ):
        raise SkillPackageError("SKILL_MANIFEST_INVALID", "runner.json `max_attempt` must be an integer >= 1")

    runtime_dependencies(manifest)  # refused at install, not discovered at run time

    named = manifest.get("schemas")
    declared: dict[str, Any] = named if isinstance(named, dict) else {}
    schemas: dict[str, dict[str, Any]] = {}
    for key in SCHEMA_KEYS:
        schema = _load_schema(root, declared.get(key), key, warnings)
        if schema is None:
            if key == "output":
                raise SkillPackageError(
                    "SKILL_SCHEMA_INVALID", "the output schema is required (assets/output.schema.json)"
                )
            schema = dict(EMPTY_OBJECT_SCHEMA)
        schemas[key] = schema

    return SkillPackage(
        skill_id=skill_id,
        version=version,
        name=str(manifest.get("name") or skill_id),
        description=str(manifest.get("description") or front.get("description") or ""),
        manifest=manifest,
        schemas=schemas,
        engines=engines,
        unsupported_engines=unsupported,
        effective_engines=effective,
        execution_modes=list(dict.fromkeys(modes)),
        max_attempt=max_attempt,
        artifacts=artifacts_of(manifest, schemas["output"]),
        root=root,
        warnings=warnings,
    )
