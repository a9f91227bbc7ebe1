"""What the benchmark reads from /proc: the service's processes, their memory, engine processes."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def group_members(pgids: set[int]) -> list[int]:
    """Live (non-zombie) pids whose process group is one of `pgids`: the web process and the
    worker with its django-q2 cluster (engines run in sessions of their own, so not counted)."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields and fields[0] not in ("Z", "X") and int(fields[2]) in pgids:
            members.append(int(name))
    return sorted(members)


def _kib(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _memory_of(pids: list[int]) -> dict[str, float]:
    """Summed RSS (shared pages counted once per process, as `ps` shows them) and summed PSS
    (shared pages split between their sharers, so forked workers are not counted twice)."""
    rss = sum(_kib(f"/proc/{pid}/smaps_rollup", "Rss") for pid in pids)
    pss = sum(_kib(f"/proc/{pid}/smaps_rollup", "Pss") for pid in pids)
    return {"processes": len(pids), "rss_mib": rss / 1024, "pss_mib": pss / 1024}


def memory_mib(pgids: set[int]) -> dict[str, float]:
    return _memory_of(group_members(pgids))


def processes_running(executable: Path) -> list[int]:
    """Pids whose command line runs `executable` (the bench engine is `/bin/sh <script> …`)."""
    target = str(executable).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = _stat_fields(int(name))
        if target in argv[:2] and fields and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def _cpu_ticks(pids: list[int]) -> tuple[int, int]:
    """Clock ticks of `pids`: their own (utime + stime, fields 14 and 15 of stat) and those of
    the children they reaped (cutime + cstime: engines, probes)."""
    own = reaped = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields:
            own += int(fields[11]) + int(fields[12])
            reaped += int(fields[13]) + int(fields[14])
    return own, reaped


def idle_cpu_percent(pgids: set[int], seconds: float = 10.0) -> float:
    """CPU used by the service's processes over `seconds` of doing nothing, in % of one core:
    the cost of its polling loops (task queue, supervisor, event watcher, heartbeats)."""
    pids = group_members(pgids)
    before, _ = _cpu_ticks(pids)
    time.sleep(seconds)
    return 100.0 * (_cpu_ticks(pids)[0] - before) / os.sysconf("SC_CLK_TCK") / seconds


def cpu_seconds(pgid: int) -> dict[str, float]:
    """CPU seconds so far of one process group: its own (user + system) and that of its reaped
    children (the engine processes a worker waited for)."""
    own, children = _cpu_ticks(group_members({pgid}))
    tick = os.sysconf("SC_CLK_TCK")
    return {"own": own / tick, "children": children / tick}


# --- a server's whole process tree, as `python -m bench` measures it from outside ---------------


def _children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _runs(pid: int, marks: list[bytes]) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # gone meanwhile: nothing to count
    return any(mark in argv for mark in marks)


def tree_pids(root: int, exclude: list[bytes]) -> list[int]:
    """`root` and its descendants, without any process whose command line holds one of
    `exclude` (the engine: bwrap names the executable it starts) and without what those forked."""
    children = _children_of()
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid != root and _runs(pid, exclude):
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu(root: int, exclude: list[bytes]) -> dict[str, float]:
    """CPU seconds so far of the tree: its members' own (utime + stime) and that of the children
    they reaped (cutime + cstime: engines, probes), at wall-clock time `t`."""
    pids = tree_pids(root, exclude)
    own, reaped = _cpu_ticks(pids)
    tick = os.sysconf("SC_CLK_TCK")
    return {"own_s": own / tick, "reaped_s": reaped / tick, "processes": len(pids), "t": time.time()}


def tree_memory(root: int, exclude: list[bytes]) -> dict[str, float]:
    """Summed RSS and PSS (MiB) of the tree."""
    return _memory_of(tree_pids(root, exclude))


def tree_engines(root: int, marks: list[bytes]) -> list[int]:
    """The running processes under `root` whose command line holds one of `marks`."""
    return [pid for pid in tree_pids(root, []) if _runs(pid, marks) and (_stat_fields(pid) or ["Z"])[0] not in "ZX"]
