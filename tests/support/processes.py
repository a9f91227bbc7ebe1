"""Watching processes from the tests: liveness (a zombie counts as gone), groups, cleanup."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def process_alive(pid: int) -> bool:
    """Whether `pid` is a live process; zombies (exited, not yet reaped) count as gone."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def process_group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in group `pgid`."""
    for entry in os.listdir("/proc"):
        fields = _stat_fields(entry) if entry.isdigit() else None
        if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def processes_in(directory: Path) -> list[int]:
    """Live processes (host pids) whose working directory is `directory` or below it: an engine's
    processes (it runs in its run dir), seen from outside whatever namespace they run in."""
    target = Path(directory).resolve()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if Path(cwd).is_relative_to(target) and process_alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
