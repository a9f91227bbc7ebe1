import logging
import os
import signal
import threading
import time
import uuid

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import close_old_connections, connections
from django_q.cluster import Cluster

from runs.execution import CLUSTER_TOKEN_ENV
from runs.supervision import (
    WORKER_HEARTBEAT_SECONDS,
    forget_worker,
    record_worker_recovered,
    recover_on_worker_start,
    release_own_claims,
    renew_worker_heartbeat,
    start_supervisor,
)
from skillrunner.startup import prepare_installation

logger = logging.getLogger(__name__)


def keep_database_connections() -> None:
    """The worker's processes and threads live long, so they keep their connections (django-q2's
    ORM broker would otherwise reconnect at every poll); the web process does not (settings)."""
    for alias in connections:
        connections[alias].settings_dict["CONN_MAX_AGE"] = settings.SKILLRUNNER_WORKER_CONN_MAX_AGE


class Command(BaseCommand):
    help = "Run the worker: restart recovery, the run supervisor and the django-q2 cluster, until SIGINT/SIGTERM."

    def handle(self, *args, **options):
        prepare_installation()
        keep_database_connections()
        token = uuid.uuid4().hex[:12]
        os.environ[CLUSTER_TOKEN_ENV] = token
        call_command("load_skills", verbosity=0)
        recover_on_worker_start()
        stop = threading.Event()
        supervisor = start_supervisor(stop)
        cluster = Cluster()

        def shutdown(signum, frame):
            if stop.is_set():
                return
            stop.set()
            release_own_claims(token)
            cluster.stop()

        # The cluster forks, and its processes close the connections they inherit: this process
        # must not share one with them (a PostgreSQL connection would be closed under it).
        connections.close_all()
        cluster.start()
        # Cluster installs its own handlers in __init__; ours release claims first, then stop it.
        signal.signal(signal.SIGTERM, shutdown)
        signal.signal(signal.SIGINT, shutdown)
        self._beat(token)  # recovered and serving: only now does /readyz count this worker (R-OP7)
        self.stdout.write(f"worker {token} started")
        last_beat = time.monotonic()
        while not stop.wait(0.5):
            if not cluster.sentinel.is_alive():
                break
            if time.monotonic() - last_beat >= WORKER_HEARTBEAT_SECONDS:
                last_beat = time.monotonic()
                self._beat(token)
        stop.set()
        supervisor.join(timeout=5)
        try:
            forget_worker(token)
        except Exception:
            logger.warning("could not remove worker %s from the worker table", token, exc_info=True)

    def _beat(self, token: str) -> None:
        """Renew this worker's presence (the first beat records it). A database outage must not
        end the worker: the beat is simply missed."""
        try:
            close_old_connections()
            if not renew_worker_heartbeat(token):
                record_worker_recovered(token)
        except Exception:
            logger.warning("worker heartbeat failed", exc_info=True)
