"""The parent process of `manage.py serve`: starts web (daphne) and worker, and stops both together.

`serve` execs into this module once it has migrated the database, so the parent that merely
waits for two children is a bare interpreter (about 10 MiB) instead of a Django process (99 MiB
PSS after migrating), and it sleeps on signals and the children's pidfds, never on a timer.
Nothing here may import Django.

    python -m skillrunner.launcher <host> <port>
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

STOP_GRACE_SECONDS = 30


def main(host: str, port: int) -> int:
    wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup_write)
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    python = sys.executable
    # Each child leads a process group of its own (the worker's holds its django-q2 cluster): a
    # Ctrl-C reaches this process only, which stops them in order, and a child that does not stop
    # in time is killed with everything it forked.
    children = [
        subprocess.Popen(
            [python, "-m", "daphne", "-b", host, "-p", str(port), "skillrunner.asgi:application"], process_group=0
        ),
        subprocess.Popen([python, "manage.py", "worker"], process_group=0),
    ]
    exits = [os.pidfd_open(child.pid) for child in children]
    print(f"Skill Runner on http://{host}:{port}/ (Ctrl-C stops web and worker)", flush=True)
    while not stopping and all(child.poll() is None for child in children):
        select.select([wakeup_read, *exits], [], [])
        while _drain(wakeup_read):
            pass
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return 0 if stopping else 1


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
