"""A `codex` stand-in for multi-process tests that records who ran which turn, when.

It wraps tests/support/fake_codex.py (same JSONL output, same thread/turn bookkeeping) and adds:
- one script per skill: `<root>/<skill_id>.json`, chosen from the run-local skill copy the
  service placed in `<run dir>/.codex/skills/<skill_id>` (so auto and interactive runs can share
  one service);
- a per-run pause: a prompt containing `zzz<seconds>` (e.g. the input topic "zzz2.5") sleeps that
  long before answering, so a test can hold a turn in `running`;
- `calls.jsonl`: a `start` record (time, pid, the process group of the worker that spawned it,
  run id) before anything else and an `end` record after the answer; a turn killed midway has
  no `end`;
- `env/<pid>.json`: the environment the engine process was given.

Appends are single `write` calls on O_APPEND files, so concurrent engines never interleave lines.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PAUSE = re.compile(r"zzz(\d+(?:\.\d+)?)")


def _append(path: Path, record: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _skill_of(run_dir: Path) -> str:
    skills = run_dir / ".codex" / "skills"
    names = sorted(p.name for p in skills.iterdir()) if skills.is_dir() else []
    return names[0] if names else "default"


def main(root: Path, argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    from tests.support.fake_codex import _parse as fake_parse
    from tests.support.fake_codex import main as fake_main

    if argv[:1] == ["--version"] or "--help" in argv:
        return fake_main(str(root / "default.json"), argv)
    run_dir = Path.cwd()
    try:
        worker_group = os.getpgid(os.getppid())
    except ProcessLookupError:
        worker_group = None
    skill = _skill_of(run_dir)
    thread, _ = fake_parse(argv)
    thread_log = root / "threads" / str(thread)
    turn = len(thread_log.read_text().splitlines()) if thread and thread_log.exists() else 0
    start = {
        "event": "start",
        "t": time.time(),
        "pid": os.getpid(),
        "worker_group": worker_group,
        "run": run_dir.name,
        "skill": skill,
        "turn": turn,
    }
    _append(root / "calls.jsonl", start)
    (root / "env").mkdir(exist_ok=True)
    (root / "env" / f"{os.getpid()}.json").write_text(json.dumps(dict(os.environ)))
    pause = PAUSE.search(" ".join(argv))
    if pause:
        time.sleep(float(pause.group(1)))
    script = root / f"{skill}.json"
    os.environ["CODEX_HOME"] = str(root)  # fake_codex keeps its threads and invocations beside this probe
    code = fake_main(str(script if script.exists() else root / "default.json"), argv)
    _append(
        root / "calls.jsonl", {"event": "end", "t": time.time(), "pid": os.getpid(), "run": run_dir.name, "exit": code}
    )
    return code


class ProbeEngine:
    """The executable, its per-skill scripts and what it recorded."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.binary = self.root / "codex"
        self.binary.write_text(
            f"#!{sys.executable}\n"
            "import sys\n"
            f"sys.path.insert(0, {str(REPO)!r})\n"
            "from pathlib import Path\n"
            "from tests.scaleout.probe_engine import main\n"
            f"sys.exit(main(Path({str(self.root)!r}), sys.argv[1:]))\n"
        )
        self.binary.chmod(self.binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.script("default", {"message": "{}"})

    def script(self, skill_id: str, *turns: dict[str, Any]) -> None:
        (self.root / f"{skill_id}.json").write_text(json.dumps({"turns": list(turns)}))

    def _jsonl(self, name: str) -> list[dict[str, Any]]:
        path = self.root / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def invocations(self) -> list[dict[str, Any]]:
        """fake_codex's records: argv, cwd, pid, thread, turn (0 = first turn of the thread), prompt."""
        return self._jsonl("invocations.jsonl")

    def calls(self) -> list[dict[str, Any]]:
        return self._jsonl("calls.jsonl")

    def starts(self) -> list[dict[str, Any]]:
        return [c for c in self.calls() if c["event"] == "start"]

    def intervals(self, now: float | None = None) -> list[tuple[float, float, dict[str, Any]]]:
        """(start, end, start record) per engine process; a process without `end` lasts until `now`."""
        ends = {c["pid"]: c["t"] for c in self.calls() if c["event"] == "end"}
        now = time.time() if now is None else now
        return [(c["t"], ends.get(c["pid"], now), c) for c in self.starts()]

    def max_overlap(self) -> int:
        """The largest number of engine processes that were alive at the same instant."""
        edges = sorted(
            [(start, 1) for start, _, _ in self.intervals()] + [(end, -1) for _, end, _ in self.intervals()],
            key=lambda e: (e[0], e[1]),
        )
        alive = peak = 0
        for _, delta in edges:
            alive += delta
            peak = max(peak, alive)
        return peak

    def turns_per_attempt(self) -> Counter:
        """How often an engine process started for each (run id, turn index); every value must be 1
        (R-LC14). Counted from `start` records, so a process killed before it answered counts too."""
        return Counter((c["run"], c["turn"]) for c in self.starts())

    def starts_per_run(self) -> Counter:
        return Counter(c["run"] for c in self.starts())

    def prompts_of(self, request_id: str) -> list[str]:
        return [i["prompt"] for i in self.invocations() if Path(i["cwd"]).name == request_id]

    def environments(self) -> list[dict[str, str]]:
        folder = self.root / "env"
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
