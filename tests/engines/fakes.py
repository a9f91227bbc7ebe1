"""Test doubles for the engine tests: a controllable TurnControl and fake CLI binaries."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

from engines.types import ArtifactSpec, EngineConfig, ExecutionMode, SandboxSettings, SkillMaterial, TurnRequest
from tests.support.processes import process_alive


class FakeControl:
    """Records spawned pids; asks to abort once ``abort_after`` seconds have passed."""

    def __init__(self, abort_after: float | None = None) -> None:
        self.pids: list[int] = []
        self.activity: list[dict] = []
        self.output: dict[str, bytes] = {}
        self._abort_at = None if abort_after is None else time.monotonic() + abort_after

    def on_spawn(self, pid: int) -> None:
        self.pids.append(pid)

    def on_activity(self, item: dict) -> None:
        self.activity.append(item)

    def on_output(self, stream: str, chunk: bytes) -> None:
        self.output[stream] = self.output.get(stream, b"") + chunk

    def should_abort(self) -> bool:
        return self._abort_at is not None and time.monotonic() >= self._abort_at


def write_script(path: Path, body: str, interpreter: str = "/bin/sh") -> Path:
    """An executable script at ``path``; ``interpreter`` "python" means this test's Python."""
    shebang = sys.executable if interpreter == "python" else interpreter
    path.write_text(f"#!{shebang}\n{body}", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# Mimics `codex` 0.169: `exec --help` lists neither --full-auto nor --yolo, but --yolo is
# accepted as a hidden alias; unknown flags exit 2 like clap does.
CODEX_0169 = """
case "$*" in
  "exec --help") printf '  --dangerously-bypass-approvals-and-sandbox\\n      Skip all prompts\\n  --json\\n'; exit 0;;
  "exec --yolo --help") echo "Usage: codex exec [OPTIONS] [PROMPT]"; exit 0;;
  "--version") echo "codex-cli 0.169.0"; exit 0;;
  *) echo "error: unexpected argument" >&2; exit 2;;
esac
"""


def fake_codex(tmp_path: Path) -> Path:
    return write_script(tmp_path / "codex", CODEX_0169)


def make_skill(tmp_path: Path, artifacts: tuple[ArtifactSpec, ...] = ()) -> SkillMaterial:
    source = tmp_path / "installed" / "demo-skill"
    (source / "assets").mkdir(parents=True, exist_ok=True)
    (source / "SKILL.md").write_text(
        "---\nname: demo-skill\n---\n\n# Demo\n\nWrite `report.md` into the current directory.\n",
        encoding="utf-8",
    )
    (source / "assets" / "runner.json").write_text('{"id": "demo-skill"}', encoding="utf-8")
    return SkillMaterial("demo-skill", source, artifacts)


def make_request(
    tmp_path: Path,
    mode: ExecutionMode = "interactive",
    prompt: str = "do it",
    *,
    session: str | None = None,
    model: str | None = None,
    timeout: float = 30.0,
    skill: SkillMaterial | None = None,
) -> TurnRequest:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return TurnRequest(
        run_dir=run_dir,
        prompt=prompt,
        mode=mode,
        skill=skill or make_skill(tmp_path),
        hard_timeout_seconds=timeout,
        model=model,
        session_handle=session,
    )


def make_config(tmp_path: Path, binary: str | Path, **kwargs: object) -> EngineConfig:
    """Unconfined unless a test asks: these stand-ins sit beside the run dir, which a sandbox
    refuses to show; the sandbox itself is proven by the sandbox tests (tests/engines/test_red_team_fake.py, test_seccomp.py) and the service suites."""
    kwargs.setdefault("sandbox", SandboxSettings(mode="off"))
    return EngineConfig(binary=str(binary), home=tmp_path / "engine-home", kill_grace_seconds=1.0, **kwargs)  # type: ignore[arg-type]


def wait_gone(pids: list[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(not process_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return all(not process_alive(pid) for pid in pids)
