"""The worker's django-q2 cluster: its sentinel process (which forks the task pool, the pusher and
the monitor), started and stopped by the worker's main process. The pool is one process whose
threads are the slots (worker.threadpool), not django-q2's process per slot: the worker's memory
does not grow with the cap (R-CR2).

django-q2's own Cluster is not used because of how it stops: it sets a multiprocessing.Event,
whose set() waits until every process asleep in that event's wait() has woken. The sentinel
sleeps there almost all the time, and SIGTERM sent to the whole process group or to every
process (systemd's default KillMode) kills it in its sleep; when the worker got to set() before
the sentinel was gone, it waited forever for it to wake (after a 200-run backlog, a group SIGTERM
left the worker's main process running 40 s later). Here the stop and start flags are
processes.forking.Flag: setting one never waits.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.core.management.base import CommandError
from django_q.cluster import Sentinel, get_mp_context
from django_q.conf import Conf

from engines.process import kill_tree
from processes.forking import Flag
from processes.queue_broker import wake_pusher

from .threadpool import thread_pool

logger = logging.getLogger(__name__)


def stop_grace_seconds() -> float:
    """How long a stopping cluster may take before its processes are killed: enough for its turns
    to see their claims released and kill their engines (SKILLRUNNER_KILL_GRACE_SECONDS, for an
    engine that ignores SIGTERM) and for the pool to wind down; 8 s by default. A stop normally
    takes a second or two."""
    return settings.SKILLRUNNER_KILL_GRACE_SECONDS + 3.0


class TaskCluster:
    def __init__(self, stop: Flag) -> None:
        """`stop` ends the cluster once set (ask_to_stop); its processes may read it too."""
        self._stop = stop
        self._started = Flag()
        self._sentinel = multiprocessing.get_context("fork").Process(
            target=_StoppingSentinel, args=(self._stop, self._started, uuid.uuid4()), name="sentinel"
        )

    def start(self, stopping: Callable[[], bool]) -> None:
        """Until the pool takes tasks, or the worker is told to stop meanwhile."""
        self._sentinel.start()
        while not self._started.wait(0.1) and not stopping():
            if not self._sentinel.is_alive():
                raise CommandError(f"the task cluster did not start (exit status {self._sentinel.exitcode})")

    @property
    def sentinel_fd(self) -> int:
        """Readable once the sentinel has ended."""
        return self._sentinel.sentinel

    def is_alive(self) -> bool:
        return self._sentinel.is_alive()

    def ask_to_stop(self) -> None:
        """No task is taken any more; the pool ends once its tasks have."""
        self._stop.set()

    def wait_stopped(self, deadline: float) -> None:
        """Until the sentinel has ended, or at `deadline` (monotonic) kill it and everything
        below it: a task process stuck in a turn, its engine, a dependency build."""
        self._sentinel.join(max(0.0, deadline - time.monotonic()))
        if self._sentinel.exitcode is None and self._sentinel.pid is not None:  # started, still running
            logger.warning("the task cluster did not stop in time; killing it")
            kill_tree(self._sentinel.pid)
            self._sentinel.join()


class _StoppingSentinel(Sentinel):
    def spawn_cluster(self) -> None:
        self.pool_size = 1  # one process, whose Conf.WORKERS threads take the tasks
        super().spawn_cluster()

    def spawn_worker(self) -> None:
        """django-q2's, with the thread pool's process in place of its worker process: the guard
        watches it (its death, its timer) and reincarnates it as it would a worker."""
        timer = multiprocessing.Value("f", -1)
        process = get_mp_context().Process(
            target=thread_pool,
            args=(self.task_queue, self.result_queue, timer, self.timeout, Conf.WORKERS),
            name=f"Process-{uuid.uuid4().hex}",
        )
        process.daemon = Conf.DAEMONIZE_WORKERS
        process.timer = timer
        self.pool.append(process)
        process.start()

    def stop(self) -> None:
        # The embedded default's pusher may be asleep for up to 5 s (processes.queue_broker):
        # woken, it sees the stop at once.
        self.event_out.set()
        if self.pusher is not None:
            wake_pusher(self.pusher.pid)
        super().stop()
