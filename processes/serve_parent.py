"""What `manage.py serve` becomes once it has forked web and worker: a bare interpreter that
waits on stop signals and its children's pidfds, then stops both children together.

The exec drops the Django process's memory: every page of it the children had already copied was
the parent's alone (24 MiB); this process is 4.5. Nothing here may import more than the standard
library: it runs without site-packages.

    python -I -S processes/serve_parent.py <grace seconds> <pid> [<pid> ...]   (children of this
    process, each leading its process group, with SIGINT and SIGTERM blocked until the handlers
    are set; the grace period covers the worker's drain and its stop, R-OP10)
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def supervise(grace: float, children: list[int]) -> int:
    """Wait until a stop signal or a child's end, then stop the rest: SIGTERM, and after `grace`
    seconds SIGKILL to the child's whole process group. Another stop signal meanwhile is passed
    on (it ends the worker's drain at once). 0 when stopped by a signal."""
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    stopping = False
    signals = 0

    def stop(signum, frame):
        nonlocal stopping, signals
        stopping = True
        signals += 1

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    exits = {pid: os.pidfd_open(pid) for pid in children}
    running = set(children)
    while not stopping and running == set(children):
        select.select([wake_read, *exits.values()], [], [])
        while _drained(wake_read):
            pass
        running -= {pid for pid in running if _reaped(pid)}
    for pid in running:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    passed_on = min(signals, 1)  # the SIGTERM above passed on the first
    while running and time.monotonic() < deadline:
        select.select([wake_read, *(exits[pid] for pid in running)], [], [], max(0.0, deadline - time.monotonic()))
        while _drained(wake_read):
            pass
        running -= {pid for pid in running if _reaped(pid)}
        if signals > passed_on:
            passed_on = min(signals, 1)  # the SIGTERM above passed on the first
            for pid in running:
                os.kill(pid, signal.SIGTERM)
    for pid in running:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return 0 if stopping else 1


def _reaped(pid: int) -> bool:
    return os.waitpid(pid, os.WNOHANG)[0] == pid


def _drained(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


if __name__ == "__main__":
    sys.exit(supervise(float(sys.argv[1]), [int(pid) for pid in sys.argv[2:]]))
