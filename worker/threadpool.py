"""The cluster's task pool: one process whose threads are its slots, whatever the cap.

django-q2 forks one process per worker, and each grew private memory while it ran turns, so the
worker's memory grew with SKILLRUNNER_MAX_CONCURRENT_TURNS (idle PSS of the whole service 141 MiB
at cap 1 and 183 at cap 16, 568 after a 50-run burst at cap 16: R-CR2, docs/benchmarks.md). A turn mostly waits on its
engine process and parses its output, which threads do as well as processes. Each thread here
runs django-q2's own worker loop (django_q.worker.worker) on the sentinel's queues, so tasks are
taken, run, saved and acknowledged as before; what django-q2 did per process is done per thread:

- taking a task: django-q2's processes block in the queue's get(), holding its lock (shared by
  every process of the cluster) while they wait. A process killed then leaves it held and the
  cluster takes no task again; django-q2 kills only a busy process, but this one always has a
  waiting thread while a slot is free. So here one thread at a time waits, on a lock of this
  process, for the queue to be readable, and takes the task without blocking (_Tasks.get).
- stop: the sentinel puts one STOP per pool process; once it is taken, every thread of this
  one takes a STOP, and ends once its task has.
- timeout: the sentinel times processes, not threads, so this process's main thread times each
  thread's task (its timer as django-q2 sets it). A thread cannot be killed, and replacing the
  process would end every other turn in it: a task past its timeout (SKILLRUNNER_MAX_TASK_SECONDS,
  days) is logged and left to its thread, and a new thread takes its slot. A turn stuck so no
  longer renews its claim, which the supervisor then fails as it would a dead worker's.
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
from multiprocessing.connection import wait
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from queue import Empty, SimpleQueue

from django.db import connections
from django_q.conf import Conf
from django_q.worker import worker

from processes.memory import TrimWhenIdle

logger = logging.getLogger(__name__)

STOP = "STOP"  # django-q2's poison pill


class _Tasks:
    """The sentinel's task queue as this process's threads read it (django-q2's worker loop only
    calls get())."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._taking = threading.Lock()  # one thread waits for the next task; this process's own
        self.stopped = False
        self.running = 0  # tasks taken and not yet done
        self._counting = threading.Lock()
        self._thread = threading.local()  # whether this thread's last task is still counted
        self._trim = TrimWhenIdle(lambda: self.running == 0)

    def this_threads_task_done(self) -> None:
        """Its last task is done: django-q2's loop asks for the next one, or ends (a recycled thread)."""
        with self._counting:
            if getattr(self._thread, "running", False):
                self._thread.running = False
                self.running -= 1

    def get(self) -> object:
        self.this_threads_task_done()
        if self._queue.empty():
            connections.close_all()  # idle from now on: this thread's own connections
            self._trim.soon()  # a burst's freed memory goes back, if nothing runs a second later
        with self._taking:
            while not self.stopped:
                wait([self._queue._reader])  # type: ignore[attr-defined]  # readable, no lock of the queue held
                try:
                    task = self._queue.get(block=False)  # the queue's lock only while a task is read
                except Empty:
                    continue
                self.stopped = task == STOP  # the sentinel's one STOP: every thread then gets one
                with self._counting:
                    self._thread.running = True
                    self.running += 1
                return task
            return STOP


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
        tasks.this_threads_task_done()
        connections.close_all()
        ended.put(threading.current_thread())


def thread_pool(task_queue: Queue, result_queue: Queue, timer: Synchronized, timeout: int | None, threads: int) -> None:
    """The pool process's body: `threads` threads taking tasks until the sentinel's STOP, their
    tasks timed here. `timer` is this process's as the sentinel reads it: -1, never timed out."""
    tasks = _Tasks(task_queue)
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
            finished_timer = timers.pop(finished, None)
            if finished_timer is not None and not tasks.stopped:
                if finished_timer.value != -2:  # not recycled: its loop failed (logged by the thread)
                    time.sleep(Conf.GUARD_CYCLE)  # as often as django-q2's sentinel replaces a process
                start()  # another takes its place
        now = time.monotonic()
        elapsed, last = now - last, now
        for thread, thread_timer in list(timers.items()):
            with thread_timer.get_lock():
                if thread_timer.value > 0:
                    thread_timer.value -= elapsed
                    if thread_timer.value <= 0:
                        logger.critical("a task ran past its timeout; its thread is left to it, another takes its slot")
                        del timers[thread]
                        start()
