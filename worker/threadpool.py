"""The worker's task process: django-q2's cluster as threads of one process, whatever the cap.

django-q2's cluster is a sentinel process that forks a process per slot, a pusher (broker -> task
queue) and a monitor (result queue -> database), and guards them. Each grew private memory: the
processes per slot with the cap (idle PSS of the whole service 141 MiB at cap 1 and 183 at cap
16, 568 after a 50-run burst at cap 16: R-CR2, docs/benchmarks.md), and the sentinel, pusher and
monitor, three copies of the heap pages they touched, another 14 MiB idle and 25 after a burst.
A turn mostly waits on its engine process and parses its output, the pusher and the monitor
wait on the broker and the queues: threads do that as well as processes. So here the threads of
one process run django-q2's own loops (django_q.pusher.pusher, django_q.worker.worker,
django_q.monitor.monitor) on queues of this process, and tasks are taken, run, saved and
acknowledged as before; the worker's main process starts this one, and starts another if it dies
(worker.cluster). What django-q2 did per process is done per thread:

- taking a task: the pusher fills the task queue (bounded by Conf.QUEUE_LIMIT), and the thread
  that went idle last takes the next task (TaskQueue).
- stop: once the worker's stop flag is set, the pusher ends at its next wait (worker.cluster wakes
  it) and queues one STOP after the tasks it pushed; it stays at the queue's head for every thread,
  and each ends once its task has. Then the monitor saves the last results and ends.
- timeout: this process's main thread times each thread's task (its timer as django-q2 sets it).
  A thread cannot be killed, and killing the process would end every other turn in it: a task
  past its timeout (SKILLRUNNER_MAX_TASK_SECONDS, days) is logged and left to its thread, and a
  new thread takes its slot. A turn stuck so no longer renews its claim, which the supervisor then
  fails as it would a dead worker's.
- recycling: a thread that has run Conf.RECYCLE tasks ends and a fresh one takes its place. The
  process itself is not recycled: it would first have to wait for its longest task (a sticky
  run's conversation may hold one for hours), and its memory does not grow with the slots.
- a pusher or monitor whose loop fails (the broker or the database away) is started again, as
  the sentinel reincarnated their processes; and the schedules (the hourly sweeps) are run from
  here, as the sentinel ran them.
- database connections: Django's are per thread. A slot's thread closes its own once it has
  waited CONNECTIONS_KEPT_IDLE_SECONDS for a task: kept through a burst, never held by an idle slot.
- a task's function is looked up once per process by its name (`_look_up_function`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import pydoc
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue

from django.db import connections
from django_q.brokers import Broker, get_broker
from django_q.conf import Conf
from django_q.monitor import monitor
from django_q.pusher import pusher
from django_q.scheduler import scheduler
from django_q.utils import get_func_repr
from django_q.worker import worker

from processes.forking import Flag
from processes.memory import TrimWhenIdle

logger = logging.getLogger(__name__)

STOP = "STOP"  # django-q2's poison pill
SCHEDULER_SECONDS = 30  # as often as django-q2's sentinel looks for schedules that are due
# A slot's next turn is offered only once a turn ends and frees a slot, so a slot's thread found
# the queue empty after nearly every turn. Closing its connection then meant opening one for the
# next turn a few ms later: 1.1 ms of a run's CPU, the schema parsed again each time (issue #43).
CONNECTIONS_KEPT_IDLE_SECONDS = 0.5


def task_process(stop: Flag, started: Flag) -> None:
    """The task process's body, until `stop` is set and its tasks have ended: the pusher, the
    monitor and the schedules in threads of their own, the slots' threads timed in this one.
    `started` is set once it takes tasks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the worker, which stops this in order
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)  # the worker's wake-up pipe, inherited when it started this one again
    broker = get_broker()
    broker.ping()
    tasks = TaskQueue(Conf.QUEUE_LIMIT or 0)
    results: SimpleQueue[object] = SimpleQueue()
    saving = _thread("monitor", _save_results, results, broker)
    _thread("pusher", _push, tasks, stop, broker)
    if Conf.SCHEDULER:
        _thread("scheduler", _schedule, stop, broker)
    started.set()
    thread_pool(tasks, results, Conf.TIMEOUT, Conf.WORKERS)
    results.put(STOP)  # after the last result: the monitor saves it, then ends
    saving.join()


def _thread(name: str, target: Callable[..., None], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def _push(tasks: TaskQueue, stop: Flag, broker: Broker) -> None:
    """django-q2's pusher until `stop` is set, then one STOP after the tasks it pushed: each of
    them is taken before the slots end. Started again when it fails, as the sentinel did."""
    while not stop.is_set():
        try:
            pusher(tasks, stop, broker)  # returns once `stop` is set, or 10 s after a broker failure
        except Exception:
            logger.exception("the task process's pusher failed; it starts again")
            stop.wait(Conf.GUARD_CYCLE)
    tasks.put(STOP)


def _save_results(results: SimpleQueue[object], broker: Broker) -> None:
    """django-q2's monitor until the STOP after the last result; started again when it fails (the
    database away), as the sentinel did."""
    while True:
        try:
            monitor(results, broker)
            return
        except Exception:
            logger.exception("the task process's monitor failed; it starts again")
            time.sleep(Conf.GUARD_CYCLE)


def _schedule(stop: Flag, broker: Broker) -> None:
    """Queues the schedules that are due (the hourly sweeps), as django-q2's sentinel did."""
    while not stop.wait(SCHEDULER_SECONDS):
        try:
            scheduler(broker=broker)
        except Exception:
            logger.exception("the schedules could not be read; trying again in %d s", SCHEDULER_SECONDS)


class TaskQueue:
    """The queue between the pusher and the slots' threads, bounded as django-q2's
    (Conf.QUEUE_LIMIT; the pusher calls put(), django-q2's worker loop get()). A task goes to the
    thread that went idle last: in a burst the same few threads take the tasks, their connections
    open, and the threads that stay idle keep none of it. In order of waiting, every slot's thread
    took its turn and each built its own: the tree held 5 MiB more after a 50-run burst at cap 16
    than at cap 6, where as many turns ran at once."""

    def __init__(self, limit: int = 0) -> None:
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # the pusher waits for it when full
        self._limit = limit
        self._tasks: deque[object] = deque()
        self._idle: list[threading.Event] = []  # the waiting threads' wake-ups, the last idle last
        self.stopped = False
        self.running = 0  # tasks taken and not yet done
        self._thread = threading.local()  # whether this thread's last task is still counted
        self._trim = TrimWhenIdle(lambda: self.running == 0)

    def put(self, task: object) -> None:
        _look_up_function(task)
        with self._room:
            while self._limit and len(self._tasks) >= self._limit:
                self._room.wait()
            self._tasks.append(task)
            self._wake_last_idle()

    def this_threads_task_done(self) -> None:
        """Its last task is done: django-q2's loop asks for the next one, or ends (a recycled thread)."""
        with self._lock:
            if getattr(self._thread, "running", False):
                self._thread.running = False
                self.running -= 1

    def get(self) -> object:
        self.this_threads_task_done()
        if not self._tasks:
            self._trim.soon()  # a burst's freed memory goes back, if nothing runs a second later
        with self._lock:
            while not self._tasks:  # another thread may take the task it was woken for
                woken = threading.Event()
                self._idle.append(woken)
                self._lock.release()
                try:
                    if not woken.wait(CONNECTIONS_KEPT_IDLE_SECONDS):
                        connections.close_all()  # idle from now on: this thread's own connections
                        self._trim.soon()  # and what they held goes back too
                        woken.wait()
                finally:
                    self._lock.acquire()
            if self._tasks[0] == STOP:  # left for the others: one STOP ends them all
                self.stopped = True
                self._wake_last_idle()
                return STOP
            self._thread.running = True
            self.running += 1
            self._room.notify()
            return self._tasks.popleft()

    def _wake_last_idle(self) -> None:
        if self._idle:
            self._idle.pop().set()


def _look_up_function(task: object) -> None:
    """The task's function in place of its dotted name, looked up once per process. django-q2's
    worker loop looks a name up (pydoc.locate) on every task, which first tries it as a module:
    each turn left an ImportError and an AttributeError, their tracebacks and frames in cycles for
    the collector. A name it cannot find stays, for the loop to fail the task as it would."""
    if isinstance(task, dict) and isinstance(task.get("func"), str):
        task["func"] = _function(task["func"])


@functools.cache
def _function(name: str) -> Callable[..., object] | str:
    found = pydoc.locate(name)
    return found if callable(found) and get_func_repr(found) == name else name  # saved under the same name


class _Timer:
    """A thread's timer, as django-q2's worker loop sets a process's: seconds left of its task
    (plus 3), -1 idle, -2 recycled."""

    def __init__(self) -> None:
        self.value = -1.0
        self._lock = threading.Lock()

    def get_lock(self) -> threading.Lock:
        return self._lock


def _work(
    tasks: TaskQueue,
    result_queue: SimpleQueue[object],
    timer: _Timer,
    timeout: int | None,
    ended: SimpleQueue[threading.Thread],
) -> None:
    try:
        worker(tasks, result_queue, timer, timeout)  # django-q2's loop, as in one of its processes
    finally:
        tasks.this_threads_task_done()
        connections.close_all()
        ended.put(threading.current_thread())


def thread_pool(tasks: TaskQueue, result_queue: SimpleQueue[object], timeout: int | None, threads: int) -> None:
    """`threads` threads taking tasks until the STOP, their tasks timed here; returns once all have
    ended."""
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
                    time.sleep(Conf.GUARD_CYCLE)  # as often as django-q2's sentinel replaced a process
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
