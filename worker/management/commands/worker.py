import logging
import os
import select
import signal
import threading
import time
import uuid

from django.conf import settings
from django.core.checks import Tags
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connections

from enginehost.config import sandbox_check
from engines.sandbox import remove_orphaned_state
from processes.forking import forks_end_with_their_parent, run_in_child
from processes.startup import prepare_installation
from runs.supervision import (
    WORKER_HEARTBEAT_SECONDS,
    forget_worker,
    record_worker_recovered,
    recover_on_worker_start,
    release_own_claims,
    renew_worker_heartbeat,
    retry_while_database_away,
    start_supervisor,
)
from worker.cluster import TaskCluster, stop_grace_seconds
from worker.execution import CLUSTER_TOKEN_ENV, share_stop_flag

logger = logging.getLogger(__name__)


def keep_database_connections() -> None:
    """The worker's processes and threads live long, so they keep their connections (django-q2's
    ORM broker would otherwise reconnect at every poll); the web process does not (settings)."""
    for alias in connections:
        connections[alias].settings_dict["CONN_MAX_AGE"] = settings.SKILLRUNNER_WORKER_CONN_MAX_AGE
        connections[alias].settings_dict["OPTIONS"].pop("pool", None)


class Command(BaseCommand):
    help = "Run the worker: restart recovery, the run supervisor and the django-q2 cluster, until SIGINT/SIGTERM."
    # Every system check but those of what the web serves, the URLconf and the admin: a worker
    # serves neither, and checking them imports every view and middleware (drf-spectacular, DRF's
    # authentication), half of a worker's start-up (0.55 s of CPU). `manage.py check` and `serve`
    # still run them.
    requires_system_checks = [
        tag for name, tag in vars(Tags).items() if not name.startswith("_") and tag not in (Tags.urls, Tags.admin)
    ]

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-load-skills",
            dest="load_skills",
            action="store_false",
            help="Skip installing the skills folder at start (`serve` has just done it).",
        )

    def handle(self, *args, load_skills: bool, **options):
        forks_end_with_their_parent()  # its start-up child and its cluster, however it ends
        prepare_installation()
        keep_database_connections()
        token = uuid.uuid4().hex[:12]
        os.environ[CLUSTER_TOKEN_ENV] = token
        # A connection dropped while starting (the database restarting, a failover) is waited out
        # as a running worker would, instead of ending the worker (and with it `serve`). In a child
        # of its own, so the cluster forked below does not start from its memory (processes.forking).
        run_in_child("the worker's start-up recovery", retry_while_database_away, self._recover, load_skills)
        # Checked here, the sandbox's availability is known to the task process forked below:
        # it would otherwise check it (a bwrap start, 8 ms) in its first turn, and again each time it is replaced.
        sandbox_check()
        # A stop signal only notes itself, here and while the cluster starts: the stop below
        # never runs in the middle of a query or while a lock is held.
        signalled: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, frame: signalled.append(signum))
        signal.signal(signal.SIGINT, lambda signum, frame: signalled.append(signum))
        stop = threading.Event()
        # One flag: the cluster stops taking tasks, and its turns see the worker stopping.
        cluster = TaskCluster(stop=share_stop_flag())
        # The task process is forked, and closes the connections it inherits: no connection
        # of this process (any thread's) may be shared with it, or closing it there would close
        # it under this process too. So the supervisor thread starts only after the fork.
        connections.close_all()
        cluster.start(stopping=lambda: bool(signalled))
        supervisor = start_supervisor(stop)
        # Idle, this process sleeps until a signal arrives (the wake-up fd), the task process
        # ends (its process sentinel fd) or the next heartbeat is due: no polling in between.
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        if not signalled:
            self._beat(token)  # recovered and serving: only now does /readyz count this worker (R-OP7)
            self.stdout.write(f"worker {token} started")
        last_beat = time.monotonic()
        failed: CommandError | None = None
        while not signalled:
            due = last_beat + WORKER_HEARTBEAT_SECONDS - time.monotonic()
            ready, _, _ = select.select([wake_read, cluster.sentinel_fd], [], [], max(0.0, due))
            if wake_read in ready:
                os.read(wake_read, 512)
            if not cluster.is_alive() and not signalled:
                try:
                    supervisor = self._start_cluster_again(cluster, stop, supervisor, signalled)
                except CommandError as error:  # stopped as on a signal, then the worker ends with it
                    failed = error
                    break
            if time.monotonic() - last_beat >= WORKER_HEARTBEAT_SECONDS:
                last_beat = time.monotonic()
                self._beat(token)
        self._stop(token, cluster, stop, supervisor, signalled, wake_read)
        signal.set_wakeup_fd(-1)
        os.close(wake_read)
        os.close(wake_write)
        if failed is not None:  # a worker without its cluster serves nothing: a process manager restarts it
            raise failed

    def _start_cluster_again(
        self, cluster: TaskCluster, stop: threading.Event, supervisor: threading.Thread, signalled: list[int]
    ) -> threading.Thread:
        """A task process that died (killed for memory, say) is replaced, as django-q2's sentinel
        replaced its workers; its turns' claims name its pid, so the supervisor fails or recovers
        them. The supervisor pauses meanwhile: no thread of this process may hold a database
        connection across the fork. A process that cannot start raises CommandError."""
        logger.critical("the task process ended on its own (exit status %s); starting another", cluster.exitcode)
        stop.set()
        supervisor.join()  # it closes its connections as it ends
        stop.clear()
        connections.close_all()
        cluster.start(stopping=lambda: bool(signalled))
        return start_supervisor(stop)

    def _stop(
        self,
        token: str,
        cluster: TaskCluster,
        stop: threading.Event,
        supervisor: threading.Thread,
        signalled: list[int],
        wake_read: int,
    ) -> None:
        """No new turn starts here and nothing dispatches from here. Signalled, the turns running
        get SKILLRUNNER_DRAIN_SECONDS to finish (_drain); then this worker's turns that are left end
        (released claims: their processes see them gone and kill their engines, and so does this
        process) while the cluster winds down, all within stop_grace_seconds(). Bounded whatever
        the cluster is doing: what is left then is killed."""
        stop.set()
        cluster.ask_to_stop()
        if signalled and settings.SKILLRUNNER_DRAIN_SECONDS > 0:
            self._drain(token, cluster, signalled, wake_read)
        deadline = time.monotonic() + stop_grace_seconds()
        supervisor.join(timeout=max(0.0, deadline - time.monotonic()))
        close_old_connections()
        try:
            release_own_claims(token)
        except Exception:
            logger.warning("could not release the claims of worker %s", token, exc_info=True)
        cluster.wait_stopped(deadline)
        try:
            forget_worker(token)
        except Exception:
            logger.warning("could not remove worker %s from the worker table", token, exc_info=True)

    def _drain(self, token: str, cluster: TaskCluster, signalled: list[int], wake_read: int) -> None:
        """R-OP10: until the cluster has ended (it ends once its running turns have: it takes no
        more, and a sticky run's wait for a reply ends when its worker stops), the drain time is
        over or another signal comes. Meanwhile the worker's row says it drains (/readyz)."""
        deadline = time.monotonic() + settings.SKILLRUNNER_DRAIN_SECONDS
        signals = len(signalled)
        self.stdout.write(f"worker {token} draining (up to {settings.SKILLRUNNER_DRAIN_SECONDS:g} s)")
        self.stdout.flush()
        next_beat = time.monotonic()
        while cluster.is_alive() and len(signalled) == signals:
            now = time.monotonic()
            if now >= deadline:
                logger.warning("turns still running after the drain time; they fail as interrupted")
                return
            if now >= next_beat:
                self._beat(token, draining=True)
                next_beat = now + WORKER_HEARTBEAT_SECONDS
            ready, _, _ = select.select([wake_read, cluster.sentinel_fd], [], [], min(deadline, next_beat) - now)
            if wake_read in ready:
                os.read(wake_read, 512)
        if len(signalled) > signals:
            logger.warning("stopped again while draining; the turns still running fail as interrupted")

    def _recover(self, load_skills: bool) -> None:
        """Everything before the cluster takes work; each step may run again after a failure."""
        if removed := remove_orphaned_state():
            logger.info("removed the sandbox state of %d turns whose worker was killed", removed)
        if load_skills:
            call_command("load_skills", verbosity=0)
        recover_on_worker_start()

    def _beat(self, token: str, *, draining: bool = False) -> None:
        """Renew this worker's presence (the first beat records it; a draining worker's is not
        recorded again once gone). A database outage must not end the worker: the beat is simply
        missed."""
        try:
            close_old_connections()
            if not renew_worker_heartbeat(token, draining=draining) and not draining:
                record_worker_recovered(token)
        except Exception:
            logger.warning("worker heartbeat failed", exc_info=True)
