"""`make run`: migrate, then serve web (daphne) and worker, forked from this process, until
SIGINT/SIGTERM stops both.

Forked rather than started afresh: both children begin with every module already imported, so
the memory holding them stays shared between all the service's processes (the worker's django-q2
cluster forks from it again), and `gc.freeze()` keeps the collector from writing to, and so
copying, those pages. Started as a fresh interpreter, daphne alone was 84 MiB of private memory.
The parent then execs into skillrunner.serve_parent, which waits on signals and the children.
"""

import gc
import os
import signal
import sys
import traceback
from collections.abc import Callable

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

from skillrunner.serve_parent import STOP_SIGNALS
from skillrunner.startup import prepare_installation


class Command(BaseCommand):
    help = "Migrate, load bundled skills, then serve web (daphne) and worker together until SIGINT/SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args, host: str, port: int, **options):
        prepare_installation()  # before the children start: they read the key it creates
        call_command("migrate", interactive=False, verbosity=0)
        call_command("createcachetable", verbosity=0)
        call_command("load_skills")
        # The web application and the worker with all they import, before the fork: imported in the
        # worker's process instead, django-q2's cluster and the engines were its private memory.
        import runs.management.commands.worker  # noqa: F401
        import skillrunner.asgi  # noqa: F401

        _close_database_connections()
        gc.collect()
        gc.freeze()
        # Until skillrunner.serve_parent has its handlers in place, a stop signal waits instead of
        # killing this process with its children left behind; each child unblocks them at once.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        children = [_fork(_serve_web, host, port), _fork(call_command, "worker")]
        self.stdout.write(f"Skill Runner on http://{host}:{port}/ (Ctrl-C stops web and worker)")
        self.stdout.flush()
        python = sys.executable  # the same process (pid, children, blocked signals) goes on without Django
        os.execv(python, [python, "-m", "skillrunner.serve_parent", *map(str, children)])


def _close_database_connections() -> None:
    """Before the fork: a connection shared with a child would be closed under it, and a
    PostgreSQL pool's threads do not exist in a child, which could then never open a connection
    again (the pool the migrations used must go, not only its connections)."""
    for connection in connections.all():
        connection.close()
        close_pool = getattr(connection, "close_pool", None)
        if close_pool is not None:
            close_pool()


def _serve_web(host: str, port: int) -> None:
    from daphne.cli import CommandLineInterface  # installs daphne's reactor: in this child only

    CommandLineInterface().run(["-b", host, "-p", str(port), "skillrunner.asgi:application"])


def _fork(main: Callable[..., object], *args: object) -> int:
    """Run ``main(*args)`` in a child leading a process group of its own: a Ctrl-C reaches the
    parent only, which stops the children in order, and a child that does not stop in time is
    killed with everything it forked."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.setpgid(pid, pid)  # also here, so the group exists before the parent may signal it
        return pid
    code = 1
    try:
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        main(*args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
