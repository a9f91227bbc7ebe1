"""Forked children of the service's long-lived processes: `serve` forks web and worker, and both
`serve` and the worker run their start-up database work in a child that ends with it.

Why a child for the start-up work: every process forked later (daphne, django-q2's cluster)
starts from the memory of the process that did it. Done in a child, whatever that work allocated
and freed ends with the child: the idle service at cap 4 measured 170 -> 167 MiB PSS embedded and
155 -> 149 scale-out. Measured, not explained: the heap was no more fragmented (docs/benchmarks.md,
stop 23).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from django.core.management.base import CommandError
from django.db import connections


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
