"""Memory a process's allocator keeps free, given back to the system once the process is idle.

glibc keeps what is freed for the process's next allocations, and gives back only the free top of
its main heap. A burst leaves its pages scattered through the heap: after a 50-run burst at cap 16
the web and the task process each held 4-5 MiB of them, free and resident, for as long as they ran.
malloc_trim(0) returns every free page (1-2 ms for a fragmented 100 MiB heap). Done a second after
a process found itself with nothing to do, and only if it still has nothing to do then: a stream
of runs trims about once a second, a burst once at its end.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

IDLE_SECONDS = 1.0


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
