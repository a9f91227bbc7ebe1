"""Collecting the files a final answer declares (R-OU1), a step of its own after schema validation.

Three forms, all read through runs.runfiles (never through a link, never outside the run, R-SB7):

- `x-filename` (older packages): the file is `artifacts/<x-filename>`; when it is not there but
  the output field points at a file elsewhere in the run, that file is moved there.
- by value (`x-type: artifact` or `file`, no `x-filename`): the field holds the path of a file
  the agent chose, relative to the run directory or absolute inside it. A file outside
  `artifacts/` is moved into it, keeping its name (a clash gets `-1`, `-2`, ... before the
  suffix), and the field is rewritten to `artifacts/<name>`.
- `x-type: artifact-manifest`: the field points at a JSON object `{label: path}`; every file it
  lists is collected as above, and the manifest itself is collected with its values rewritten.

A required artifact whose file is missing (a manifest entry included) is `ARTIFACT_MISSING`,
naming the field and the path; an optional one may be null.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from . import runfiles

ARTIFACTS_DIR = "artifacts"
MAX_MANIFEST_BYTES = 1 << 20
MAX_NAME_SUFFIX = 1000


@dataclass
class Missing:
    """A required file that is not there: the output field (and manifest label), and why."""

    field: str
    reason: str
    label: str | None = None
    expected: str = "the path of a regular file inside the run directory"
    fixed: str | None = None  # the file an x-filename names

    def __str__(self) -> str:
        where = self.field if self.label is None else f"{self.field}[{self.label}]"
        return f"{where}: {self.fixed + ': ' if self.fixed else ''}{self.reason}"


@dataclass
class Collection:
    """What collecting did: the output with its artifact fields rewritten, and what went wrong."""

    data: dict[str, Any]
    missing: list[Missing] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)

    @property
    def error(self) -> dict[str, str] | None:
        if not self.missing:
            return None
        message = "required artifact missing: " + "; ".join(str(m) for m in self.missing)
        return {"code": "ARTIFACT_MISSING", "message": message}

    @property
    def problems(self) -> list[dict[str, str]]:
        """The missing files as repair problems (R-RP1): JSON pointer, what was expected, what came."""
        return [
            {
                "pointer": "/" + m.field.replace("~", "~0").replace("/", "~1"),
                "expected": m.expected,
                "got": m.reason if m.label is None else f"entry {m.label!r}: {m.reason}",
            }
            for m in self.missing
        ]


class _Collector:
    def __init__(self, run_dir: Path, apply: bool):
        self.run_dir = Path(run_dir)
        self.apply = apply  # False: only check that every file is there, change nothing
        # A run's directory as the agent may have written it: as configured and fully resolved.
        self.roots = list(dict.fromkeys([str(self.run_dir), str(self.run_dir.resolve())]))
        self.collected: dict[str, str] = {}  # source → where it went, for files named twice

    def relative(self, value: str) -> str | None:
        """`value` as a checked run-relative path, or None when it leaves the run."""
        for root in self.roots:
            prefix = root.rstrip("/") + "/"
            if value.startswith(prefix):
                value = value[len(prefix) :]
                break
        else:
            if value.startswith("/"):
                return None
        normal = posixpath.normpath(value)
        return "/".join(runfiles.parts(normal) or ()) or None

    def is_file(self, relative: str) -> bool:
        return runfiles.is_file(self.run_dir, relative)

    def place(self, source: str, name: str | None = None) -> str | None:
        """Move the safe file `source` into artifacts/ (under `name`, else its own name, suffixed
        on a clash); files already in artifacts/ stay. Returns where it is now, or None."""
        if source in self.collected:
            return self.collected[source]
        if not self.is_file(source):
            return None
        if (source.startswith(ARTIFACTS_DIR + "/") and name is None) or not self.apply:
            self.collected[source] = source
            return source
        target_name = PurePosixPath(name or PurePosixPath(source).name)
        for index in range(MAX_NAME_SUFFIX):
            candidate = target_name.name if index == 0 else f"{target_name.stem}-{index}{target_name.suffix}"
            target = f"{ARTIFACTS_DIR}/{candidate}"
            if runfiles.move_file(self.run_dir, source, target):  # never replaces what is there
                self.collected[source] = target
                return target
            if not self.is_file(source):
                return None
        return None

    def by_value(self, value: Any) -> tuple[str | None, str]:
        """(run-relative path in artifacts/, or None with the reason) for a by-value field."""
        if not isinstance(value, str) or not value.strip():
            return None, f"{json.dumps(value)} is not a file path"
        relative = self.relative(value.strip())
        if relative is None:
            return None, f"{value!r} is not inside the run directory"
        placed = self.place(relative)
        if placed is None:
            return None, f"{value!r} is not a regular file in the run directory"
        return placed, ""


def _fixed_name(collector: _Collector, spec: dict[str, Any], value: Any) -> str | None:
    """The older form: artifacts/<x-filename>, moved there from where the field points if need be."""
    target = f"{ARTIFACTS_DIR}/{spec['filename']}"
    if runfiles.parts(target) is None:  # a name stored before names were checked at install (R-SB7)
        return None
    if collector.is_file(target):
        return target
    if isinstance(value, str) and value.strip():
        relative = collector.relative(value.strip())
        if relative and collector.is_file(relative):
            if not collector.apply or runfiles.move_file(collector.run_dir, relative, target):
                return target
    return None


def _read_manifest(collector: _Collector, relative: str) -> dict[str, Any] | None:
    handle = runfiles.open_file(collector.run_dir, relative)
    if handle is None:
        return None
    with handle:
        raw = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        return None
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _manifest(collector: _Collector, prop: str, value: Any, result: Collection, required: bool) -> Any:
    """Collect every file a manifest lists, then the manifest itself with its values rewritten."""
    expected = "the path of a JSON object {label: path} inside the run directory"
    if not isinstance(value, str) or not value.strip():
        result.missing.append(Missing(prop, f"{json.dumps(value)} is not a manifest path", expected=expected))
        return value
    source = collector.relative(value.strip())
    manifest = _read_manifest(collector, source) if source else None
    if source is None or manifest is None:
        reason = f"{value!r} is not a JSON object {{label: path}} in the run directory"
        result.missing.append(Missing(prop, reason, expected=expected))
        return value
    rewritten: dict[str, Any] = {}
    for label, entry in manifest.items():
        if entry is None:
            rewritten[label] = None
            continue
        placed, reason = collector.by_value(entry)
        if placed is None:
            # A manifest's entries are as required as the manifest itself.
            if required:
                result.missing.append(Missing(prop, reason, label=str(label)))
            else:
                _warn(result, f"{prop}[{label}]: {reason}")
        rewritten[label] = placed or entry
    if not collector.apply:
        return value
    content = json.dumps(rewritten, indent=2, ensure_ascii=False).encode() + b"\n"
    # The manifest goes where its files went, under its own name; one already in artifacts/ is
    # replaced in place by its rewritten form.
    in_place = source.startswith(ARTIFACTS_DIR + "/")
    runfiles.remove_file(collector.run_dir, source)
    target = _write_new(collector, source if in_place else f"{ARTIFACTS_DIR}/{PurePosixPath(source).name}", content)
    if target is None:
        result.missing.append(Missing(prop, f"the manifest could not be written into {ARTIFACTS_DIR}/"))
        return value
    return target


def _write_new(collector: _Collector, path: str, content: bytes) -> str | None:
    """Create `path` (or `stem-N.suffix` beside it on a clash) holding `content`."""
    wanted = PurePosixPath(path)
    for index in range(MAX_NAME_SUFFIX):
        candidate = wanted if index == 0 else wanted.with_name(f"{wanted.stem}-{index}{wanted.suffix}")
        if runfiles.write_new_file(collector.run_dir, str(candidate), content):
            return str(candidate)
    return None


def _warn(result: Collection, message: str) -> None:
    result.warnings.append({"code": "ARTIFACT_OPTIONAL_MISSING", "message": f"optional artifact missing: {message}"})


def collect_artifacts(
    data: dict[str, Any], specs: list[dict[str, Any]], run_dir: Path, *, apply: bool = True
) -> Collection:
    """Gather the files `data` (a schema-valid final answer) declares into artifacts/ (R-OU1).

    With `apply` False nothing is moved or written: the same verdict (what is missing) for a
    decision that must stay pure; `data` then comes back unchanged.
    """
    result = Collection(data=dict(data))
    collector = _Collector(run_dir, apply)
    for spec in specs:
        prop = spec.get("property")
        value = data.get(prop) if prop else None
        required = bool(spec.get("required"))
        if spec.get("filename"):
            fixed = f"{ARTIFACTS_DIR}/{spec['filename']}"
            if _fixed_name(collector, spec, value) is None and required:
                reason = "no such file" + (f" (the field says {json.dumps(value, ensure_ascii=False)})" if prop else "")
                result.missing.append(
                    Missing(prop or spec["role"], reason, expected=f"an existing file {fixed}", fixed=fixed)
                )
            continue
        if prop is None or value is None:
            if required:
                result.missing.append(Missing(prop or spec["role"], "no file path given"))
            continue  # an optional artifact may be null (or absent)
        if spec.get("kind") == "manifest":
            result.data[prop] = _manifest(collector, prop, value, result, required)
            continue
        placed, reason = collector.by_value(value)
        if placed is not None:
            result.data[prop] = placed if apply else value
        elif required:
            result.missing.append(Missing(prop, reason))
        else:
            _warn(result, f"{prop}: {reason}")
    return result
