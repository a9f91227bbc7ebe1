"""Python environments for a skill's `runtime.dependencies` (R-SK7), built with uv outside the sandbox.

One environment per distinct dependency list (and interpreter), under
`<data>/skill-envs/<hash>/`: built once, by one worker at a time (a file lock), within a bounded
time, then reused by every run that needs the same list. A build that fails or takes too long
leaves nothing behind; the caller records a warning and runs the turn without it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from uv import find_uv_bin

READY_MARKER = ".skillrunner-ready"
LOCK_POLL_SECONDS = 0.2
_OUTPUT_TAIL_CHARS = 600


class DependencyBuildError(Exception):
    """The environment could not be built (a package that does not exist, no network, too slow)."""


@dataclass(frozen=True)
class DependencyEnvironment:
    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def readonly_paths(self) -> tuple[Path, ...]:
        """What the sandbox must show for the environment to work: itself and its interpreter."""
        return (self.root, Path(sys.base_prefix).resolve())


def _interpreter() -> str:
    """The service's own base interpreter: environments never download a Python."""
    return str(Path(getattr(sys, "_base_executable", sys.executable)).resolve())


def environment_key(dependencies: list[str]) -> str:
    """Order and duplicates do not matter; the interpreter does (compiled wheels are per version)."""
    material = json.dumps({"python": sys.version, "dependencies": sorted(set(dependencies))})
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _OUTPUT_TAIL_CHARS else "…" + text[-_OUTPUT_TAIL_CHARS:]


def _run_uv(args: list[str], deadline: float) -> None:
    """One uv command, killed with everything it started when the deadline passes."""
    env = dict(os.environ)
    env.setdefault("UV_CACHE_DIR", str(settings.DATA_DIR / "uv-cache"))
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"
    try:
        process = subprocess.Popen(
            [find_uv_bin(), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group, so a timeout kills its helpers too
        )
    except OSError as exc:  # FileNotFoundError included: uv missing from the installation
        raise DependencyBuildError(f"uv cannot be started: {exc}") from exc
    try:
        output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise DependencyBuildError(
            f"building the environment took longer than {settings.SKILLRUNNER_DEPENDENCY_BUILD_TIMEOUT} s"
        ) from None
    if process.returncode != 0:
        raise DependencyBuildError(f"uv {args[0]} failed: {_tail(output)}")


def _build(target: Path, dependencies: list[str], deadline: float) -> None:
    shutil.rmtree(target, ignore_errors=True)  # a crashed earlier build left it unfinished
    try:
        _run_uv(["venv", "--quiet", "--python", _interpreter(), str(target)], deadline)
        python = str(target / "bin" / "python")
        # Copies, not links into the cache: the environment stands alone once built.
        _run_uv(["pip", "install", "--quiet", "--link-mode", "copy", "--python", python, *dependencies], deadline)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    (target / READY_MARKER).write_text(json.dumps(sorted(set(dependencies))) + "\n", encoding="utf-8")


def _acquire(lock_file, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise DependencyBuildError("another worker is still building this environment") from None
            time.sleep(LOCK_POLL_SECONDS)


def prepare_environment(dependencies: list[str]) -> DependencyEnvironment:
    """The ready environment for `dependencies`, building it first if no worker has yet."""
    root = settings.DATA_DIR / "skill-envs"
    target = root / environment_key(dependencies)
    if (target / READY_MARKER).is_file():
        return DependencyEnvironment(target)
    root.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + settings.SKILLRUNNER_DEPENDENCY_BUILD_TIMEOUT
    with open(root / f"{target.name}.lock", "w") as lock_file:
        _acquire(lock_file, deadline)
        try:
            if not (target / READY_MARKER).is_file():  # built by the worker we waited for?
                _build(target, dependencies, deadline)
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    return DependencyEnvironment(target)


def dependency_warning(exc: DependencyBuildError) -> dict[str, str]:
    return {
        "code": "RUNTIME_DEPENDENCIES_INJECTION_FAILED",
        "message": f"the skill's runtime.dependencies could not be prepared; the turn runs without them: {exc}",
    }
