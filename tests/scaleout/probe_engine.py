"""A `codex` stand-in for multi-process tests that records who ran which turn, when.

It runs inside the agent sandbox like a real CLI (R-SB1): `ProbeEngine` installs it with
tests/support/fake_codex.py (same JSONL output, same thread/turn bookkeeping) in a folder of its
own, which the sandbox shows read-only, and starts it with the system python (the sandbox shows
/usr, not the virtualenv). It adds:
- one script per skill: `<install dir>/<skill_id>.json`, chosen from the run-local skill copy the
  service placed in `<run dir>/.codex/skills/<skill_id>` (so auto and interactive runs can share
  one service);
- a per-run pause: a prompt containing `zzz<seconds>` (e.g. the input topic "zzz2.5") sleeps that
  long before answering, so a test can hold a turn in `running`;
- in its engine home ($CODEX_HOME: `<data dir>/engine-homes/codex/<request id>`, the one place
  besides the run dir the sandbox lets it write): `calls.jsonl`, a `start` record (time, a token
  naming this process, its PID namespace, the worker tag, run id, turn) before anything else and
  an `end` record after the answer, so a turn killed midway has no `end`; `environments.jsonl`:
  the environment it was given.

No pid is recorded: inside the sandbox pids are the sandbox's own. What only the host knows
(which engine processes live, their namespaces, the worker that started them) the tests read from
outside (`Deployment.engine_processes_of`, `invariants.assert_engine_sandboxed`). The worker tag
is the one thing the engine learns from its worker: `Deployment` ends each worker cluster's PATH
with a folder named after its index (PATH is among the variables an engine inherits, R-EN5).

Appends are single `write` calls on O_APPEND files, so concurrent engines never interleave lines.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

PAUSE = re.compile(r"zzz(\d+(?:\.\d+)?)")
FAKE_CODEX = Path(__file__).resolve().parents[1] / "support" / "fake_codex.py"
# Set by the executable of worker cluster `index` (ProbeEngine.binary_of): the sandbox passes the
# engine none of the worker's own environment, nor its PATH.
WORKER_VARIABLE = "PROBE_WORKER"


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


def _worker_of(value: str | None) -> int | None:
    return int(value) if value else None


def main(root: Path, argv: list[str]) -> int:
    sys.path.insert(0, str(root))  # fake_codex.py is installed beside this file
    fake = importlib.import_module("fake_codex")

    if argv[:1] == ["--version"] or "--help" in argv:
        return fake.main(str(root / "default.json"), argv)
    run_dir = Path.cwd()
    home = Path(os.environ["CODEX_HOME"])
    skill = _skill_of(run_dir)
    thread, _ = fake._parse(argv)
    thread_log = home / "threads" / str(thread)
    turn = len(thread_log.read_text().splitlines()) if thread and thread_log.exists() else 0
    process = uuid.uuid4().hex
    start = {
        "event": "start",
        "t": time.time(),
        "process": process,
        "pid_namespace": os.readlink("/proc/self/ns/pid"),
        "worker": _worker_of(os.environ.get(WORKER_VARIABLE)),
        "run": run_dir.name,
        "skill": skill,
        "turn": turn,
    }
    _append(home / "calls.jsonl", start)
    _append(home / "environments.jsonl", dict(os.environ))
    pause = PAUSE.search(" ".join(argv))
    if pause:
        time.sleep(float(pause.group(1)))
    script = root / f"{skill}.json"
    code = fake.main(str(script if script.exists() else root / "default.json"), argv)
    _append(home / "calls.jsonl", {"event": "end", "t": time.time(), "process": process, "exit": code})
    return code


class ProbeEngine:
    """The executable, its per-skill scripts and what it recorded in the engine homes of `data_dir`."""

    def __init__(self, root: Path, data_dir: Path):
        self.root = Path(root)
        self.homes = Path(data_dir) / "engine-homes" / "codex"
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # the engine runs as an unprivileged uid of its own (engines/sandbox.py)
        for source in (Path(__file__), FAKE_CODEX):
            shutil.copyfile(source, self.root / source.name)
            (self.root / source.name).chmod(0o644)
        self.binary = self._executable("codex", "")
        self.script("default", {"message": "{}"})

    def binary_of(self, worker: int) -> Path:
        """The executable worker cluster `worker` runs: it tells the probe which cluster it is."""
        return self._executable(f"codex-worker-{worker}", f"{WORKER_VARIABLE}={worker} ")

    def _executable(self, name: str, assignment: str) -> Path:
        # Beside probe_engine.py, in the folder the sandbox shows. The system python when there is
        # one: a sandboxed engine sees /usr, not the venv's home.
        path = self.root / name
        path.write_text(
            f'#!/bin/sh\nPY=/usr/bin/python3\n[ -x "$PY" ] || PY="{sys.executable}"\n'
            f'{assignment}exec "$PY" -I "{self.root / "probe_engine.py"}" "{self.root}" "$@"\n'
        )
        path.chmod(0o755)
        return path

    def script(self, skill_id: str, *turns: dict[str, Any]) -> None:
        path = self.root / f"{skill_id}.json"
        path.write_text(json.dumps({"turns": list(turns)}))
        path.chmod(0o644)

    def _jsonl(self, name: str) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.homes.glob(f"*/{name}")):
            found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return found

    def invocations(self) -> list[dict[str, Any]]:
        """fake_codex's records: argv, cwd, thread, turn (0 = first turn of the thread), prompt."""
        return sorted(self._jsonl("invocations.jsonl"), key=lambda i: i["time"])

    def calls(self) -> list[dict[str, Any]]:
        return sorted(self._jsonl("calls.jsonl"), key=lambda c: c["t"])

    def starts(self) -> list[dict[str, Any]]:
        return [c for c in self.calls() if c["event"] == "start"]

    def intervals(self, now: float | None = None) -> list[tuple[float, float, dict[str, Any]]]:
        """(start, end, start record) per engine process; a process without `end` lasts until `now`."""
        calls = self.calls()
        ends = {c["process"]: c["t"] for c in calls if c["event"] == "end"}
        now = time.time() if now is None else now
        return [(c["t"], ends.get(c["process"], now), c) for c in calls if c["event"] == "start"]

    def max_overlap(self) -> int:
        """The largest number of engine processes that were alive at the same instant."""
        intervals = self.intervals()
        edges = sorted(
            [(start, 1) for start, _, _ in intervals] + [(end, -1) for _, end, _ in intervals],
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
        return self._jsonl("environments.jsonl")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
