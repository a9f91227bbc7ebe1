"""R-CR2: a worker's slots are threads of one task process (worker.threadpool), so its memory does
not grow with SKILLRUNNER_MAX_CONCURRENT_TURNS: as many processes at any cap, every turn running
at once in the one pool process. Before, django-q2 forked a process per slot (cap + 1 of them)."""

from __future__ import annotations

import os
import pydoc
import threading
import time
import uuid
from pathlib import Path
from queue import SimpleQueue

import django_q.pusher as pusher_module
import pytest
from django.utils import timezone
from django_q.conf import Conf
from django_q.signing import SignedPackage
from django_q.utils import get_func_repr

from processes import memory
from processes.forking import Flag
from tests.support.processes import children, parent, processes_in
from tests.support.service_processes import with_fake_codex
from worker import threadpool
from worker.threadpool import TaskQueue, thread_pool

# --- the pool itself, in this process -------------------------------------------------------

_ran: list[threading.Thread] = []
_together: threading.Barrier | None = None
_released = threading.Event()


def _meet() -> int:
    """A task that returns only once every slot runs one."""
    _ran.append(threading.current_thread())
    assert _together is not None
    _together.wait(timeout=10)
    return os.getpid()


def _note() -> None:
    _ran.append(threading.current_thread())


def _hang() -> None:
    _released.wait(timeout=30)


def _task(func) -> dict:
    return {"id": uuid.uuid4().hex, "name": "t", "func": func, "args": (), "kwargs": {}, "started": timezone.now()}


def _results(queue: SimpleQueue, count: int) -> list[dict]:
    return [queue.get(timeout=10) for _ in range(count)]


def test_the_pool_runs_a_task_on_each_of_its_threads_at_once_and_stops_them_all_with_one_stop():
    global _together
    _ran.clear()
    _together = threading.Barrier(4)
    tasks, results = TaskQueue(), SimpleQueue()
    for _ in range(4):
        tasks.put(_task(_meet))
    tasks.put("STOP")  # the pusher puts one once stopped
    done = threading.Thread(target=thread_pool, args=(tasks, results, None, 4))
    done.start()
    done.join(timeout=20)
    assert not done.is_alive(), "one STOP did not end every thread of the pool"
    finished = _results(results, 4)
    assert [task["success"] for task in finished] == [True] * 4, [task["result"] for task in finished]
    assert {task["result"] for task in finished} == {os.getpid()}
    assert len(set(_ran)) == 4


def test_a_tasks_function_is_looked_up_once_by_its_name(monkeypatch):
    """django-q2's loop looked the name up on every task, leaving two exceptions in cycles each time."""
    _ran.clear()
    threadpool._function.cache_clear()
    looked_up: list[str] = []
    locate = pydoc.locate
    monkeypatch.setattr(pydoc, "locate", lambda name: looked_up.append(name) or locate(name))
    name = f"{__name__}._note"
    tasks, results = TaskQueue(), SimpleQueue()
    for func in (name, name, name, f"{__name__}._nowhere"):
        tasks.put(_task(func))
    tasks.put("STOP")
    thread_pool(tasks, results, None, 1)
    finished = _results(results, 4)
    assert [task["success"] for task in finished] == [True, True, True, False]
    assert len(_ran) == 3
    assert [get_func_repr(task["func"]) for task in finished[:3]] == [name] * 3  # saved under its name
    assert "is not defined" in finished[3]["result"]  # as django-q2 fails a name it cannot find
    assert looked_up.count(name) == 1


def test_a_thread_that_ran_its_share_of_tasks_is_replaced(monkeypatch):
    """Its last task counts as done, though it asks for no other: the pool is idle again once all
    are, and gives its memory back (processes.memory.TrimWhenIdle)."""
    monkeypatch.setattr(Conf, "RECYCLE", 1)
    trimmed = threading.Event()
    monkeypatch.setattr(memory, "_malloc_trim", trimmed.set)
    _ran.clear()
    tasks, results = TaskQueue(), SimpleQueue()
    for _ in range(6):
        tasks.put(_task(_note))
    done = threading.Thread(target=thread_pool, args=(tasks, results, None, 2))
    done.start()
    assert all(task["success"] for task in _results(results, 6))
    assert trimmed.wait(timeout=10)
    tasks.put("STOP")
    done.join(timeout=20)
    assert not done.is_alive()
    assert len(set(_ran)) == 6  # a fresh thread for each task


def test_a_task_past_its_timeout_is_left_to_its_thread_and_another_takes_its_slot(monkeypatch):
    """A thread cannot be killed, and replacing the process would end every other turn in it."""
    monkeypatch.setattr(Conf, "GUARD_CYCLE", 0.2)
    _released.clear()
    _ran.clear()
    tasks, results = TaskQueue(), SimpleQueue()
    tasks.put(_task(_hang))
    tasks.put(_task(_note))
    pool = threading.Thread(target=thread_pool, args=(tasks, results, 1, 1))  # 1 s, and django-q2's 3 s of slack
    started = time.monotonic()
    pool.start()
    try:
        (noted,) = _results(results, 1)
        assert noted["func"] is _note and noted["success"]
        assert 3.5 < time.monotonic() - started < 10
        tasks.put("STOP")
        pool.join(timeout=10)
        assert not pool.is_alive(), "the pool waited for the task past its timeout"
    finally:
        _released.set()


def _taking(tasks: TaskQueue, taken: dict) -> threading.Thread:
    """A thread that waits for one task (noted under its name), once it waits."""
    waiting = len(tasks._idle)
    thread = threading.Thread(target=lambda: taken.setdefault(threading.current_thread().name, tasks.get()))
    thread.start()
    deadline = time.monotonic() + 10
    while len(tasks._idle) == waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    return thread


def test_a_task_goes_to_the_thread_that_went_idle_last():
    """So in a burst the same few threads take the tasks, their connections open, and the others
    build none."""
    tasks, taken = TaskQueue(), {}
    first, last = _taking(tasks, taken), _taking(tasks, taken)
    tasks.put("a task")
    last.join(timeout=10)
    assert taken == {last.name: "a task"}
    tasks.put("STOP")
    first.join(timeout=10)
    assert taken == {last.name: "a task", first.name: "STOP"}


@pytest.mark.django_db(transaction=True)
def test_a_slot_thread_keeps_its_connection_between_turns_and_closes_it_once_idle(monkeypatch):
    """A slot's next turn comes only once a turn ends: closing at once meant a new connection for
    nearly every turn. Kept CONNECTIONS_KEPT_IDLE_SECONDS, then closed: never held by an idle slot."""
    from django.db import connection, connections

    closed = threading.Event()

    class Connections:
        def close_all(self) -> None:
            connections.close_all()
            closed.set()

    monkeypatch.setattr(threadpool, "connections", Connections())
    monkeypatch.setattr(threadpool, "CONNECTIONS_KEPT_IDLE_SECONDS", 30)
    tasks = TaskQueue()
    seen: SimpleQueue = SimpleQueue()

    def slot() -> None:
        while tasks.get() != threadpool.STOP:
            before = connection.connection  # this thread's, as the task finds it
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            seen.put((before, connection.connection))

    def when_waiting(task: str) -> tuple:
        deadline = time.monotonic() + 10
        while not tasks._idle and time.monotonic() < deadline:
            time.sleep(0.01)
        tasks.put(task)
        return seen.get(timeout=10)

    thread = threading.Thread(target=slot)
    thread.start()
    try:
        first_before, first = when_waiting("first turn")
        monkeypatch.setattr(threadpool, "CONNECTIONS_KEPT_IDLE_SECONDS", 0.05)  # the wait after the next turn
        next_before, _ = when_waiting("the next turn, while the slot's thread waits")
        assert closed.wait(timeout=10)
        later_before, _ = when_waiting("a turn after a pause")
    finally:
        tasks.put(threadpool.STOP)
        thread.join(timeout=10)
    assert first_before is None and first is not None
    assert next_before is first, "the connection was closed between two turns in a row"
    assert later_before is None, "an idle slot's thread kept its connection"


def test_the_pusher_waits_while_the_queue_is_full():
    """Bounded as django-q2's (Conf.QUEUE_LIMIT): the broker keeps what no slot can take soon."""
    tasks = TaskQueue(limit=1)
    tasks.put("first")
    pushing = threading.Thread(target=tasks.put, args=("second",))
    pushing.start()
    pushing.join(timeout=0.3)
    assert pushing.is_alive(), "the pusher put a task into a full queue"
    assert tasks.get() == "first"
    pushing.join(timeout=10)
    assert not pushing.is_alive()
    assert tasks.get() == "second"


# --- the pusher and the monitor, threads of the same process ---------------------------------


class _Broker:
    """What django-q2's pusher calls, in memory: each dequeue() hands out the next of `batches` (an
    exception is raised instead); once they are all out, the worker stops."""

    def __init__(self, batches: list, stop: Flag) -> None:
        self.batches, self.stop, self.failed = list(batches), stop, []
        self.list_key = "test"

    def dequeue(self):
        if not self.batches:
            self.stop.set()
            return None
        batch = self.batches.pop(0)
        if isinstance(batch, Exception):
            raise batch
        return [(ack_id, SignedPackage.dumps(task)) for ack_id, task in batch]

    def fail(self, ack_id) -> None:
        self.failed.append(ack_id)


def _pushed(batches: list) -> list:
    stop = Flag()
    tasks = TaskQueue()
    pushing = threading.Thread(target=threadpool._push, args=(tasks, stop, _Broker(batches, stop)))
    pushing.start()
    pushing.join(timeout=10)
    assert not pushing.is_alive(), "the pusher did not end once the worker stopped"
    return [*iter(tasks.get, "STOP"), "STOP"]


def test_a_stopped_pusher_queues_one_stop_after_the_tasks_it_pushed():
    first, second = _task("tasks.first"), _task("tasks.second")
    pushed = _pushed([[(1, first)], [(2, second)]])
    assert [task if task == "STOP" else (task["id"], task["ack_id"]) for task in pushed] == [
        (first["id"], 1),
        (second["id"], 2),
        "STOP",
    ]


def test_a_pusher_whose_broker_failed_starts_again(monkeypatch):
    """django-q2's pusher ends 10 s after a broker failure; the sentinel then started another."""
    monkeypatch.setattr(pusher_module, "sleep", lambda seconds: None)
    task = _task("tasks.after")
    pushed = _pushed([ConnectionError("the broker is away"), [(7, task)]])
    assert [item if item == "STOP" else item["id"] for item in pushed] == [task["id"], "STOP"]


def test_a_monitor_that_failed_starts_again_and_saves_the_rest(monkeypatch):
    monkeypatch.setattr(Conf, "GUARD_CYCLE", 0.01)
    saved: list = []

    def monitor(results, broker):
        for task in iter(results.get, "STOP"):
            if task == "fails":
                raise RuntimeError("the database is away")
            saved.append(task)

    monkeypatch.setattr(threadpool, "monitor", monitor)
    results: SimpleQueue = SimpleQueue()
    for item in ("before", "fails", "after", "STOP"):
        results.put(item)
    saving = threading.Thread(target=threadpool._save_results, args=(results, None))
    saving.start()
    saving.join(timeout=10)
    assert not saving.is_alive()
    assert saved == ["before", "after"]


def test_the_schedules_are_queued_from_the_task_process_until_it_stops(monkeypatch, caplog):
    """As django-q2's sentinel did every 30 s: the hourly sweeps are django-q2 schedules. A
    failure (the database away) is logged and the next look comes as usual."""
    monkeypatch.setattr(threadpool, "SCHEDULER_SECONDS", 0.01)
    stop, broker, looks = Flag(), object(), []

    def scheduler(broker):
        looks.append(broker)
        if len(looks) == 1:
            raise ConnectionError("the database is away")
        if len(looks) == 3:
            stop.set()

    monkeypatch.setattr(threadpool, "scheduler", scheduler)
    scheduling = threading.Thread(target=threadpool._schedule, args=(stop, broker))
    scheduling.start()
    scheduling.join(timeout=10)
    assert not scheduling.is_alive()
    assert looks == [broker] * 3
    assert "the schedules could not be read" in caplog.text


# --- a worker at a cap of 4 -----------------------------------------------------------------

CAP = 4


@pytest.mark.timeout(120)
def test_a_worker_runs_every_slot_at_once_in_one_task_process(tmp_path):
    live = with_fake_codex(
        tmp_path, {"SKILLRUNNER_MAX_CONCURRENT_TURNS": str(CAP), "SKILLRUNNER_USER_MAX_RUNNING": str(CAP)}
    )
    release = tmp_path / "engine" / "release"  # the turns run until it exists
    live.fake.script({"message": "Where to?", "wait_for": str(release)})
    try:
        token = live.token("alice")
        live.start_web()
        tree = live.start_tree("worker")
        live.wait_until(lambda: live.readyz() == 200, 60, "the worker to serve")
        runs = [live.start_trip(token) for _ in range(CAP)]
        for request_id in runs:
            live.wait_for_status(token, request_id, {"running"})
        live.wait_until(lambda: len(live.fake.invocations()) == CAP, 30, "every turn's engine to start")

        (task_process,) = children(tree.pid)  # no sentinel, pusher or monitor process: threads of this one
        engines = {pid for request_id in runs for pid in _engine(live.data_dir, request_id)}
        spawners = {parent(pid) for pid in engines} - engines  # not what the engines started in turn
        assert spawners == {task_process}, f"the {CAP} turns ran in processes {spawners}"

        release.touch()
        for request_id in runs:
            live.wait_for_status(token, request_id, {"waiting_user"})
    finally:
        live.stop()


def _engine(data_dir: Path, request_id: str) -> list[int]:
    return processes_in(data_dir / "runs" / request_id)
