"""Watching processes from the tests: liveness (a zombie counts as gone), groups, cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def parent(pid: int) -> int | None:
    """The parent's pid, or None if there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


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


def end_together(processes: list[subprocess.Popen], sig: int, *, to_group: bool, grace: float) -> None:
    """`sig` to every process still running (to its process group if `to_group`), at once; up to
    `grace` s for them all to end; then SIGKILL to the process group of each one still running.
    As stopping them one by one would, without their waits adding up."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        try:
            if to_group:
                os.killpg(process.pid, sig)
            else:
                process.send_signal(sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    left = [process for process in running if process.poll() is None]
    for process in left:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for process in left:
        process.wait(timeout=10)


def kill_trees(trees: list[ProcessTree]) -> None:
    """SIGKILL to whatever is left of each tree, all at once, until every reaper, with nothing
    left to reap, has ended."""
    while alive := [tree for tree in trees if tree.reaper.poll() is None]:
        for tree in alive:
            kill_all(tree.left())
        for tree in alive:
            try:
                tree.reaper.wait(timeout=1 / len(alive))
            except subprocess.TimeoutExpired:
                pass


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) processes below `pid`, found by parentage in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = _stat_fields(entry) if entry.isdigit() else None
        if fields is not None and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(children.get(child, []))
    return sorted(found)


def describe(pids: list[int]) -> str:
    """One line per process: pid and command line (for a failure message)."""
    lines = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = "(gone)"
        lines.append(f"{pid}: {cmdline.strip()[:160]}")
    return "\n".join(lines)


class ProcessTree:
    """A command run under tests/support/subreaper.py, leading a session of its own as under a
    service manager: every process it starts stays a descendant of the reaper however it
    detaches, until it ends. So what a stop leaves behind can be counted, and is always killed
    (kill_trees)."""

    def __init__(self, argv: list[str], *, cwd: Path, env: dict[str, str], log: IO[bytes]):
        self.reaper = subprocess.Popen(
            [sys.executable, "-m", "tests.support.subreaper", *argv],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not (started := children(self.reaper.pid)):
            if time.monotonic() > deadline or self.reaper.poll() is not None:
                raise AssertionError(f"{argv} did not start under its reaper")
            time.sleep(0.01)
        self.pid = started[0]  # the command itself: the reaper's first and, at first, only child

    def signal(self, sig: signal.Signals, to: str) -> None:
        """`sig` to the command's process ("parent"), its process group ("group": a terminal's
        Ctrl-C), or every process of the tree at once ("tree": systemd's KillMode=control-group)."""
        targets = {"parent": [self.pid], "group": [-self.pid], "tree": self.left()}[to]
        for target in targets:
            try:
                os.kill(target, sig)
            except ProcessLookupError:
                pass

    def left(self) -> list[int]:
        return descendants(self.reaper.pid)

    def wait(self, timeout: float) -> list[int]:
        """The processes still left after up to `timeout` seconds; [] once the tree has ended."""
        try:
            self.reaper.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self.left()
        return []


def children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
