"""Forked children of the service's long-lived processes: `serve` forks web and worker, and both
`serve` and the worker run their start-up database work in a child that ends with it.

Why a child for the start-up work: every process forked later (daphne, django-q2's cluster)
starts from the memory of the process that did it. Done in a child, whatever that work allocated
and freed ends with the child: the idle service at cap 4 measured 170 -> 167 MiB PSS embedded and
155 -> 149 scale-out. Measured, not explained: the heap was no more fragmented (docs/benchmarks.md
as of a758104).

Every process the service forks ends with the process that forked it (forks_end_with_their_parent),
and the flags forked processes share never wait for each other (Flag): a stop, however it arrives,
leaves nothing running (README.md, "Scaling out").
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from django.core.management.base import CommandError
from django.db import connections

PR_SET_PDEATHSIG = 1
_forks_end_with_parent = False
_forking_parent = 0  # the pid of the process about to fork, noted just before each fork


def forks_end_with_their_parent() -> None:
    """From now on, every process this one forks (and those fork in turn) is sent SIGTERM by the
    kernel when its parent ends, however that ends: killed outright, or stopped while the child
    still had work. `serve`'s web and worker stop as on a stop signal; a worker's task cluster
    ends with the worker. Only for forks from a process's main thread: the kernel's signal
    follows the thread that forked."""
    global _forks_end_with_parent
    if not _forks_end_with_parent:  # a worker that `serve` forked has it from `serve` already
        os.register_at_fork(before=_note_forking_parent, after_in_child=_end_with_parent)
        _forks_end_with_parent = True


def _note_forking_parent() -> None:
    global _forking_parent
    _forking_parent = os.getpid()


def _end_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        # An exception here would only be printed (fork hooks' are ignored) and the child would
        # run on, able to outlive its parent: it ends instead, loudly.
        os.write(2, f"prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}\n".encode())
        os._exit(1)
    if os.getppid() != _forking_parent:  # the parent ended before the request took hold
        os.kill(os.getpid(), signal.SIGTERM)


def close_database_connections() -> None:
    """Before a fork: a connection shared with a child would be closed under it, and a
    PostgreSQL pool's threads do not exist in a child, which could then never open a connection
    again (the pool must go, not only its connections)."""
    for connection in connections.all():
        connection.close()
        close_pool = getattr(connection, "close_pool", None)
        if close_pool is not None:
            close_pool()


def flush_output() -> None:
    """Before a fork and before a child ends: buffered output is written once, by its writer."""
    sys.stdout.flush()
    sys.stderr.flush()


def exit_with(main: Callable[..., object], *args: object) -> NoReturn:
    """In a forked child: run ``main(*args)``, then end the child with its exit status; it never
    returns into the code that forked it."""
    code = 1
    try:
        main(*args)
        code = 0
    except SystemExit as exc:  # as the interpreter would end: None is success, other objects are printed
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        flush_output()
        os._exit(code)


def run_in_child(what: str, main: Callable[..., object], *args: object) -> None:
    """Run ``main(*args)`` in a forked child and wait for it; a CommandError naming ``what`` (the
    work as an operator reads it) if it failed. The child shares this process's group, so a Ctrl-C
    or a stop signal to the group reaches it too."""
    close_database_connections()
    flush_output()
    pid = os.fork()
    if pid == 0:
        exit_with(_then_close_connections, main, *args)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise CommandError(f"{what} failed (exit status {code})")


def _then_close_connections(main: Callable[..., object], *args: object) -> None:
    try:
        main(*args)
    finally:
        close_database_connections()


class Flag:
    """A flag shared with forked processes that is set once and stays set: set() writes a byte
    to a pipe and never waits for anyone, and wait() polls the pipe's read end.

    Instead of multiprocessing.Event, which locks and waits: its set() waits until every
    process asleep in its wait() has woken, forever for one killed in its sleep, and a process
    killed inside is_set() or wait() can leave its lock held for good."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def set(self) -> None:
        try:
            os.write(self._write, b"!")
        except BlockingIOError:
            pass  # the pipe is full of earlier sets

    def is_set(self) -> bool:
        return self.wait(0)

    def wait(self, timeout: float | None = None) -> bool:
        poller = select.poll()
        poller.register(self._read, select.POLLIN)
        return bool(poller.poll(None if timeout is None else timeout * 1000))

    def close(self) -> None:
        """Once this process no longer sets or reads it (the processes it forked keep their own)."""
        os.close(self._read)
        os.close(self._write)
