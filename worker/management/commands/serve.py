"""`make run`: migrate, then serve web (daphne) and worker, forked from this process, until
SIGINT/SIGTERM stops both.

Forked rather than started afresh: both children begin with every module already imported, so
the memory holding them stays shared between all the service's processes (the worker's django-q2
cluster forks from it again), and `gc.freeze()` keeps the collector from writing to, and so
copying, those pages. Started as a fresh interpreter, daphne alone was 84 MiB of private memory.
The parent then execs into processes.serve_parent, which waits on signals and the children.
The migrations run in a child of their own before that (processes.forking says why).
"""

import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import import_string
from django_q.brokers import get_broker

from accounts.local_mode import is_loopback_host, local_user
from engines.seccomp import SeccompUnavailable
from engines.seccomp import program as seccomp_program
from kernel.links import use_served_url
from processes import serve_parent
from processes.forking import (
    close_database_connections,
    exit_with,
    flush_output,
    forks_end_with_their_parent,
    run_in_child,
)
from processes.serve_parent import STOP_SIGNALS
from processes.startup import prepare_installation
from worker.cluster import stop_grace_seconds

# Beyond the worker's own bound (drain + stop): time for its last writes before it is killed.
STOP_MARGIN_SECONDS = 5.0


class Command(BaseCommand):
    help = "Migrate, load bundled skills, then serve web (daphne) and worker together until SIGINT/SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args, host: str, port: int, **options):
        if settings.SKILLRUNNER_LOCAL_MODE and not is_loopback_host(host):
            raise CommandError(
                f"SKILLRUNNER_LOCAL_MODE=true serves requests without credentials, so it binds loopback "
                f"only (127.0.0.1 or ::1), not {host!r}"
            )
        forks_end_with_their_parent()  # the migrations' child, web and worker: killed, this stops them too
        prepare_installation()  # before the children start: they read the key it creates
        use_served_url(host, port)  # the links in emails and webhooks, for both children
        run_in_child("preparing the database", _migrate)
        import_what_the_service_runs()
        close_database_connections()
        gc.collect()
        gc.freeze()
        # Until processes.serve_parent has its handlers in place, a stop signal waits instead of
        # killing this process with its children left behind; each child unblocks them at once.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        children = [_fork(_serve_web, host, port), _fork(call_command, "worker", "--no-load-skills")]
        self.stdout.write(f"Skill Runner on http://{host}:{port}/ (Ctrl-C stops web and worker)")
        self.stdout.flush()
        # The worker's drain, then its stop, then a margin: the children are killed after that.
        grace = settings.SKILLRUNNER_DRAIN_SECONDS + stop_grace_seconds() + STOP_MARGIN_SECONDS
        # The same process (pid, children, blocked signals) goes on without Django, in an interpreter
        # without site's imports (-S: 1.3 MiB less); isolated (-I), it finds the module by its path.
        python = sys.executable
        os.execv(python, [python, "-I", "-S", serve_parent.__file__, str(grace), *map(str, children)])


def import_what_the_service_runs() -> None:
    """The web application and the worker with all they import, before the fork: imported in the
    worker's process instead, django-q2's cluster and the engines were its private memory."""
    import daphne.server  # noqa: F401  (Twisted, and the asyncio reactor daphne installs on import)

    import notifications.tasks  # noqa: F401  (the task process's functions)
    import skillrunner.asgi  # noqa: F401
    import worker.management.commands.worker  # noqa: F401
    import worker.tasks  # noqa: F401

    # With REDIS_URL the channel layer's and the broker's modules (channels_redis, redis-py,
    # msgpack, cryptography's ciphers: 88 modules) were imported by each process at its first use,
    # into memory of its own. Building a broker imports its module and connects nowhere.
    import_string(str(settings.CHANNEL_LAYERS["default"]["BACKEND"]))
    get_broker()

    # The engines' seccomp filter, which each process built at its first sandbox check or turn:
    # pyseccomp, libseccomp and the building were 2.5 MiB of the idle tree.
    if settings.SKILLRUNNER_SANDBOX != "off":
        with contextlib.suppress(SeccompUnavailable):  # the sandbox's checks report it, as before
            seccomp_program()


def _migrate() -> None:
    call_command("migrate", interactive=False, verbosity=0)
    call_command("createcachetable", verbosity=0)
    call_command("load_skills")
    if settings.SKILLRUNNER_LOCAL_MODE:
        local_user()  # created at start, staff (R-UP1)


def _serve_web(host: str, port: int) -> None:
    from daphne.cli import CommandLineInterface

    CommandLineInterface().run(["-b", host, "-p", str(port), "skillrunner.asgi:application"])


def _fork(main: Callable[..., object], *args: object) -> int:
    """Run ``main(*args)`` in a child leading a process group of its own: a Ctrl-C reaches the
    parent only, which stops the children in order, and a child that does not stop in time is
    killed with everything it forked."""
    flush_output()
    pid = os.fork()
    if pid:
        os.setpgid(pid, pid)  # also here, so the group exists before the parent may signal it
        return pid
    exit_with(_in_own_group, main, *args)


def _in_own_group(main: Callable[..., object], *args: object) -> None:
    os.setpgid(0, 0)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    main(*args)
