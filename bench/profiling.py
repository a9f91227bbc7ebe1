"""Optional py-spy profiles of the service during a benchmark phase (`--profile DIR`).

py-spy is not a project dependency: install it into the venv yourself
(`.venv/bin/pip install py-spy`). It samples the web process and the worker with all its
django-q2 children (`--subprocesses`) and writes collapsed stacks (`--format raw`), which
`summarize` folds into the top functions by inclusive and by own time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

RATE = 100  # samples per second per thread (py-spy shares the 2 cores with the service)
# py-spy shows paths relative to the cwd
REPO_PACKAGES = tuple(
    f"{package}/"
    for package in ("accounts", "enginehost", "engines", "health", "kernel", "live", "metrics", "notifications")
    + ("processes", "runs", "skillrunner", "skills", "upstream", "worker")
)


def _py_spy() -> str:
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if found is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy (not a project dependency)")
    return found


class Profiler:
    def __init__(self, directory: Path):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.binary = _py_spy()
        self.files: list[Path] = []

    @contextlib.contextmanager
    def phase(self, target, name: str):
        recorders = []
        roles = [
            ("web", target.service.web),
            *((f"worker{index}", worker) for index, worker in enumerate(target.service.workers)),
        ]
        for role, process in roles:
            output = self.directory / f"{target.name}-{name}-{role}.txt"
            argv = [
                self.binary,
                "record",
                "--pid",
                str(process.pid),
                "--rate",
                str(RATE),
                "--format",
                "raw",
                "--output",
                str(output),
                "--nonblocking",
            ]
            if role != "web":
                argv.append("--subprocesses")
            log = open(self.directory / f"{target.name}-{name}-{role}.log", "wb")
            recorders.append(
                (subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), output, log)
            )
        try:
            yield
        finally:
            for proc, output, log in recorders:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT)  # py-spy writes its output on SIGINT
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
                log.close()
                if output.exists():
                    self.files.append(output)

    def summary(self, top: int = 25) -> str:
        return "\n\n".join(summarize(path, top) for path in self.files)


def _frames(line: str) -> tuple[list[str], int]:
    stack, _, count = line.rpartition(" ")
    return stack.split(";"), int(count)


def _short(frame: str) -> str:
    """`func (/abs/path/module.py:12)` -> `func (module.py)`: lines vary within one function."""
    name, _, location = frame.partition(" (")
    path = location.rstrip(")").rsplit(":", 1)[0]
    for marker in ("/site-packages/", "/work/main/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})" if location else name


def summarize(path: Path, top: int = 25) -> str:
    """Top functions by inclusive samples (each counted once per stack) and by own samples."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        frames, count = _frames(line)
        total += count
        short = [_short(frame) for frame in frames]
        for frame in set(short):
            inclusive[frame] += count
        own[short[-1]] += count
        for frame in {
            frame for frame, raw in zip(short, frames, strict=False) if raw.partition(" (")[2].startswith(REPO_PACKAGES)
        }:
            ours[frame] += count
    if not total:
        return f"== {path.name}: no samples"
    lines = [f"== {path.name}: {total} samples ({total / RATE:.1f} CPU-s at {RATE} Hz)"]
    lines.append("-- inclusive, project code")
    lines += [f"{count / total:6.1%}  {frame}" for frame, count in ours.most_common(top)]
    lines.append("-- inclusive, everything")
    lines += [f"{count / total:6.1%}  {frame}" for frame, count in inclusive.most_common(top)]
    lines.append("-- own time")
    lines += [f"{count / total:6.1%}  {frame}" for frame, count in own.most_common(top)]
    return "\n".join(lines)


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        print(summarize(Path(argument)))
