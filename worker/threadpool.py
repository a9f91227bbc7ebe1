"""The cluster's task pool: one process whose threads are its slots, whatever the cap.

django-q2 forks one process per worker, and each grew private memory while it ran turns, so the
worker's memory grew with SKILLRUNNER_MAX_CONCURRENT_TURNS (idle PSS of the whole service 134 MiB
at cap 1 and 180 at cap 16, about 500 after a 50-run burst: R-CR2). A turn mostly waits on its
engine process and parses its output, which threads do as well as processes. Each thread here
runs django-q2's own worker loop (django_q.worker.worker) on the sentinel's queues, so tasks are
taken, run, saved and acknowledged as before; what django-q2 did per process is done per thread:

- stop: the sentinel puts one STOP per pool process; the first thread to take it puts one more
  for each of the others (_Tasks), so every thread ends once its task has.
- timeout: the sentinel times processes, not threads, so this process's main thread times each
  thread's task (its timer as django-q2 sets it). A thread cannot be killed: a task past its
  timeout (SKILLRUNNER_MAX_TASK_SECONDS, days) gets the whole process replaced, as django-q2
  replaces a process: its other turns fail as interrupted (their claims' process is gone).
- recycling: a thread that has run Conf.RECYCLE tasks ends and a fresh one takes its place. The
  process itself is not recycled: it would first have to wait for its longest task (a sticky
  run's conversation may hold one for hours), and its memory no longer grows with the slots.
- database connections: Django's are per thread. A thread closes its own when it finds the queue
  empty: kept through a burst (a connection compiles its statements once, kernel.compiled),
  never held by an idle slot.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from queue import Empty, SimpleQueue

from django.db import connections
from django_q.conf import Conf
from django_q.worker import worker

logger = logging.getLogger(__name__)

STOP = "STOP"  # django-q2's poison pill


class _Tasks:
    """The sentinel's task queue as this process's threads read it (django-q2's worker loop only
    calls get())."""

    def __init__(self, queue: Queue, threads: int) -> None:
        self._queue = queue
        self._threads = threads
        self._lock = threading.Lock()
        self.stopped = False

    def get(self) -> object:
        if self._queue.empty():
            connections.close_all()  # idle from now on: this thread's own connections
        task = self._queue.get()
        if task == STOP:
            with self._lock:
                if not self.stopped:
                    self.stopped = True
                    for _ in range(self._threads - 1):
                        self._queue.put(STOP)
        return task


class _Timer:
    """A thread's timer, as django-q2's worker loop sets a process's: seconds left of its task
    (plus 3), -1 idle, -2 recycled."""

    def __init__(self) -> None:
        self.value = -1.0
        self._lock = threading.Lock()

    def get_lock(self) -> threading.Lock:
        return self._lock


def _work(tasks: _Tasks, result_queue: Queue, timer: _Timer, timeout: int | None, ended: SimpleQueue) -> None:
    try:
        worker(tasks, result_queue, timer, timeout)  # django-q2's loop, as in one of its processes
    finally:
        connections.close_all()
        ended.put(threading.current_thread())


def thread_pool(task_queue: Queue, result_queue: Queue, timer: Synchronized, timeout: int | None, threads: int) -> None:
    """The pool process's body: `threads` threads taking tasks until the sentinel's STOP, their
    tasks timed here. `timer` is this process's as the sentinel reads it: 0 asks it to replace
    the process (a task timed out)."""
    tasks = _Tasks(task_queue, threads)
    timers: dict[threading.Thread, _Timer] = {}
    ended: SimpleQueue[threading.Thread] = SimpleQueue()  # threads ending: seen at once, not at the next cycle

    def start() -> None:
        thread_timer = _Timer()
        thread = threading.Thread(
            target=_work, args=(tasks, result_queue, thread_timer, timeout, ended), name="task-slot", daemon=True
        )
        timers[thread] = thread_timer
        thread.start()

    for _ in range(threads):
        start()
    last = time.monotonic()
    while timers:
        with contextlib.suppress(Empty):
            finished = ended.get(timeout=Conf.GUARD_CYCLE)
            finished.join()
            del timers[finished]
            if not tasks.stopped:  # recycled, or its loop failed: another takes its place
                start()
        now = time.monotonic()
        elapsed, last = now - last, now
        for thread_timer in timers.values():
            with thread_timer.get_lock():
                if thread_timer.value > 0:
                    thread_timer.value -= elapsed
                    if thread_timer.value <= 0:
                        logger.critical("a task ran past its timeout; the task pool process is replaced")
                        timer.value = 0
                        return
