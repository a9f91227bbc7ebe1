"""glibc's allocator set for a service whose long-lived threads mostly wait (R-CR2), and the memory
it keeps free given back to the system once the process is idle.

glibc keeps what is freed for the process's next allocations, and gives back only the free top of
its main heap. A burst leaves its pages scattered through the heap: after a 50-run burst at cap 16
the web and the task process each held 4-5 MiB of them, free and resident, for as long as they ran.
malloc_trim(0) returns every free page (1-2 ms for a fragmented 100 MiB heap). Done a second after
a process found itself with nothing to do, and only if it still has nothing to do then: a stream
of runs trims about once a second, a burst once at its end.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable, Sequence

IDLE_SECONDS = 1.0
M_ARENA_MAX = -8  # glibc's mallopt parameter
MALLOC_ARENAS = 2
TUNABLES = "GLIBC_TUNABLES"
THREAD_CACHE = "glibc.malloc.tcache_count"


def limit_malloc_arenas() -> None:
    """glibc gives threads that allocate at once arenas of their own, up to 8 per core, and each
    keeps what was freed in it: the web's request threads and the worker's task threads
    (worker.threadpool) grew the tree by about 20 MiB more in a 50-run burst at cap 16 with them
    (R-CR2). Two are enough for threads that mostly wait. Inherited by forked processes, not by
    exec'd ones (engines); without glibc, nothing to do."""
    try:
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, MALLOC_ARENAS)
    except (OSError, AttributeError):
        pass


def restart_without_thread_caches(argv: Sequence[str]) -> None:
    """Starts this program again (`argv`: the whole command line, interpreter options included)
    with glibc's per-thread caches of freed blocks turned off, unless the environment already sets
    them. Each thread that ever allocated keeps up to seven freed blocks of each size to 1 KiB for
    itself, for as long as it lives, where no trim reaches them and they hold the pages around
    them: after a 50-run burst at cap 16 the task process's slot threads kept 2-3 MiB so (R-CR2).
    The caches are set up as a program starts, so only a new program can do without them. With
    another C library, nothing to do."""
    tunables = os.environ.get(TUNABLES, "")
    if THREAD_CACHE in tunables or not _glibc():
        return
    os.environ[TUNABLES] = ":".join(filter(None, (tunables, f"{THREAD_CACHE}=0")))
    os.execv(sys.executable, [sys.executable, *argv[1:]])  # argv[0] as run may name another python


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


def _malloc_trim() -> None:
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


class TrimWhenIdle:
    """`soon()` when the process may have become idle: a second later, if `idle()` still says so,
    the free memory is given back. One trim is pending at a time; `idle()` is called on a thread of
    its own, so it reads, never changes, what it looks at."""

    def __init__(self, idle: Callable[[], bool], after: float = IDLE_SECONDS) -> None:
        self._idle = idle
        self._after = after
        self._pending = threading.Lock()  # held from soon() until the trim's decision

    def soon(self) -> None:
        if self._pending.acquire(blocking=False):
            timer = threading.Timer(self._after, self._trim_if_idle)
            timer.daemon = True  # never keeps a stopping process
            timer.start()

    def _trim_if_idle(self) -> None:
        try:
            if self._idle():
                _malloc_trim()
        finally:
            self._pending.release()
