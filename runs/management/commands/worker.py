import os
import signal
import threading
import uuid

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections
from django_q.cluster import Cluster

from runs.execution import CLUSTER_TOKEN_ENV
from runs.supervision import recover_on_worker_start, release_own_claims, start_supervisor
from skillrunner.startup import prepare_installation


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

        cluster.start()
        # Cluster installs its own handlers in __init__; ours release claims first, then stop it.
        signal.signal(signal.SIGTERM, shutdown)
        signal.signal(signal.SIGINT, shutdown)
        self.stdout.write(f"worker {token} started")
        while not stop.wait(0.5):
            if not cluster.sentinel.is_alive():
                break
        stop.set()
        supervisor.join(timeout=5)
