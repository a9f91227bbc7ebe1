"""The worker's django-q2 cluster: its task process (worker.threadpool.task_process), whose threads
push, run and save the tasks, started, started again and stopped by the worker's main process.

Not django-q2's own Cluster and Sentinel: a process per slot grew the worker's memory with the
cap, and the sentinel, pusher and monitor processes each kept their own copy of the pages they
touched (worker.threadpool). And django-q2 stops its cluster by setting a multiprocessing.Event,
whose set() waits until every process asleep in that event's wait() has woken: SIGTERM sent to the
whole process group (systemd's default KillMode) killed its sentinel in that sleep, and the
worker's set() then waited forever. Here the stop and start flags are processes.forking.Flag:
setting one never waits.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable

from django.conf import settings
from django.core.management.base import CommandError

from engines.process import kill_tree
from processes.forking import Flag
from processes.queue_broker import wake_pusher

from .threadpool import task_process

logger = logging.getLogger(__name__)


def stop_grace_seconds() -> float:
    """How long a stopping cluster may take before its processes are killed: enough for its turns
    to see their claims released and kill their engines (SKILLRUNNER_KILL_GRACE_SECONDS, for an
    engine that ignores SIGTERM) and for the pool to wind down; 8 s by default. A stop normally
    takes a second or two."""
    return settings.SKILLRUNNER_KILL_GRACE_SECONDS + 3.0


class TaskCluster:
    def __init__(self, stop: Flag) -> None:
        """`stop` ends the cluster once set (ask_to_stop); its process reads it too."""
        self._stop = stop
        self._process: multiprocessing.process.BaseProcess | None = None

    def start(self, stopping: Callable[[], bool]) -> None:
        """Until the task process takes tasks, or the worker is told to stop meanwhile; again
        after it died (killed for memory, say): a worker without one serves nothing."""
        started = Flag()
        process = multiprocessing.get_context("fork").Process(
            target=task_process, args=(self._stop, started), name="tasks"
        )
        self._process = process
        process.start()
        try:
            while not started.wait(0.1) and not stopping():
                if not process.is_alive():
                    raise CommandError(f"the task process did not start (exit status {process.exitcode})")
        finally:
            started.close()

    @property
    def _task_process(self) -> multiprocessing.process.BaseProcess:
        if self._process is None:
            raise RuntimeError("the task cluster was never started")
        return self._process

    @property
    def sentinel_fd(self) -> int:
        """Readable once the task process has ended."""
        return self._task_process.sentinel

    def is_alive(self) -> bool:
        return self._task_process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self._task_process.exitcode

    def ask_to_stop(self) -> None:
        """No task is taken any more; the process ends once its tasks have. The embedded default's
        pusher may be asleep for up to 5 s (processes.queue_broker): woken, it sees the stop at once."""
        self._stop.set()
        if self._process is not None and self._process.pid is not None:
            wake_pusher(self._process.pid)

    def wait_stopped(self, deadline: float) -> None:
        """Until the task process has ended, or at `deadline` (monotonic) kill it and everything
        below it: a turn stuck, its engine, a dependency build."""
        process = self._task_process
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None and process.pid is not None:  # started, still running
            logger.warning("the task cluster did not stop in time; killing it")
            kill_tree(process.pid)
            process.join()
