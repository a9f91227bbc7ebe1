"""Helpers for tests through the job API: building requests, zips and scripted turns, watching processes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import zipfile
from pathlib import Path
from typing import Any

# Shared helpers, re-exported to this suite.
from tests.support.clients import job_body as job_body
from tests.support.polling import poll
from tests.support.processes import process_alive as process_alive
from tests.support.processes import process_group_alive as process_group_alive
from tests.support.processes import processes_in as processes_in

HAIKU_DATA = {"topic": "sea", "haiku": ["waves fold", "into the grey", "morning"], "haiku_file": "artifacts/haiku.md"}
HAIKU_TEXT = "waves fold\ninto the grey\nmorning\n"


def haiku_step(**extra: Any) -> dict[str, Any]:
    """A fake-codex step that writes the haiku artifact and answers with schema-valid output."""
    step: dict[str, Any] = {"files": {"artifacts/haiku.md": HAIKU_TEXT}, "message": json.dumps(HAIKU_DATA)}
    step.update(extra)
    return step


def create_job(client, skill_id: str = "haiku-writer", **kwargs: Any) -> dict[str, Any]:
    """POST /v1/jobs and insist on the 200 the upstream clients expect."""
    response = client.post("/v1/jobs", job_body(skill_id, **kwargs), format="json")
    assert response.status_code == 200, response.content
    return response.json()


def detail(response) -> Any:
    body = response.json()
    assert "detail" in body, body
    return body["detail"]


def error_code(response) -> str | None:
    value = detail(response)
    return value.get("code") if isinstance(value, dict) else None


def make_zip(
    entries: dict[str, bytes | str], *, compression: int = zipfile.ZIP_DEFLATED, symlinks: dict[str, str] | None = None
) -> bytes:
    """A zip with the given members; `symlinks` maps member name → link target (stored as a link)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3  # unix, so external_attr carries the file type
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def zip_folder(folder: Path, *, top: str | None = None, extra: dict[str, bytes | str] | None = None) -> bytes:
    """Zip `folder` under one top-level folder named `top` (default: the folder's name)."""
    top = top or folder.name
    entries: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            entries[f"{top}/{path.relative_to(folder).as_posix()}"] = path.read_bytes()
    entries.update(extra or {})
    return make_zip(entries)


def upload(name: str, content: bytes) -> io.BytesIO:
    handle = io.BytesIO(content)
    handle.name = name
    return handle


def tree_state(root: Path) -> dict[str, str]:
    """Every file (with a content hash) and every directory under `root`."""
    state: dict[str, str] = {}
    if not root.exists():
        return state
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            state[relative] = "link:" + os.readlink(path)
        elif path.is_dir():
            state[relative + "/"] = "dir"
        else:
            state[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def wait_until(predicate, timeout: float = 5.0, interval: float | None = None) -> bool:
    """Poll `predicate` until it is true or `timeout` seconds passed; whether it became true. The
    pause between polls grows (tests.support.polling) unless `interval` fixes it."""
    return bool(poll(predicate, timeout, interval))


def write_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)  # outright: a sandboxed engine is another uid, and the umask may be the service's 077
    return path


def clone_skill(
    source: Path,
    dest_root: Path,
    *,
    skill_id: str | None = None,
    manifest: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
    body: str | None = None,
) -> Path:
    """A copy of the skill folder `source` with its runner.json changed; `skill_id` renames it
    consistently (folder, runner.json id, SKILL.md name); `body` replaces the SKILL.md text."""
    import re
    import shutil

    skill_id = skill_id or source.name
    target = dest_root / skill_id
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    runner_path = target / "assets" / "runner.json"
    runner = json.loads(runner_path.read_text())
    runner["id"] = skill_id
    runner.update(manifest or {})
    for key in drop:
        runner.pop(key, None)
    runner_path.write_text(json.dumps(runner, indent=2))
    skill_md = target / "SKILL.md"
    text = re.sub(r"(?m)^name: .*$", f"name: {skill_id}", skill_md.read_text(), count=1)
    if body is not None:
        text = text[: text.index("---", 3) + 3] + "\n\n" + body + "\n"
    skill_md.write_text(text)
    return target


# Every endpoint under /v1/jobs/{id}, as (method, suffix).
RUN_ENDPOINTS = [
    ("get", ""),
    ("post", "/upload"),
    ("get", "/interaction/pending"),
    ("post", "/interaction/reply"),
    ("get", "/interaction/history"),
    ("post", "/cancel"),
    ("get", "/result"),
    ("get", "/artifacts"),
    ("get", "/artifacts/artifacts/haiku.md"),
    ("get", "/artifacts/haiku.md"),
    ("get", "/bundle"),
    ("get", "/logs"),
    ("get", "/logs?attempt=1&stream=stdout"),
    ("get", "/events/history?after_seq=0"),
    ("get", "/events"),
]
