"""R-CR2: a worker's slots are threads of one task process (worker.threadpool), so its memory does
not grow with SKILLRUNNER_MAX_CONCURRENT_TURNS: as many processes at any cap, every turn running
at once in the one pool process. Before, django-q2 forked a process per slot (cap + 1 of them)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import uuid
from multiprocessing import Queue, Value
from pathlib import Path

import pytest
from django.utils import timezone
from django_q.conf import Conf

from processes import memory
from tests.support.processes import children, parent, processes_in
from tests.support.service_processes import with_fake_codex
from worker.threadpool import thread_pool

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


def _results(queue: Queue, count: int) -> list[dict]:
    return [queue.get(timeout=10) for _ in range(count)]


def test_the_pool_runs_a_task_on_each_of_its_threads_at_once_and_stops_them_all_with_one_stop():
    global _together
    _ran.clear()
    _together = threading.Barrier(4)
    tasks, results, timer = Queue(), Queue(), Value("f", -1)
    for _ in range(4):
        tasks.put(_task(_meet))
    tasks.put("STOP")  # the sentinel puts one per pool process
    done = threading.Thread(target=thread_pool, args=(tasks, results, timer, None, 4))
    done.start()
    done.join(timeout=20)
    assert not done.is_alive(), "one STOP did not end every thread of the pool"
    finished = _results(results, 4)
    assert [task["success"] for task in finished] == [True] * 4, [task["result"] for task in finished]
    assert {task["result"] for task in finished} == {os.getpid()}
    assert len(set(_ran)) == 4


def test_a_thread_that_ran_its_share_of_tasks_is_replaced(monkeypatch):
    """Its last task counts as done, though it asks for no other: the pool is idle again once all
    are, and gives its memory back (processes.memory.TrimWhenIdle)."""
    monkeypatch.setattr(Conf, "RECYCLE", 1)
    trimmed = threading.Event()
    monkeypatch.setattr(memory, "_malloc_trim", trimmed.set)
    _ran.clear()
    tasks, results, timer = Queue(), Queue(), Value("f", -1)
    for _ in range(6):
        tasks.put(_task(_note))
    done = threading.Thread(target=thread_pool, args=(tasks, results, timer, None, 2))
    done.start()
    assert all(task["success"] for task in _results(results, 6))
    assert trimmed.wait(timeout=10)
    tasks.put("STOP")
    done.join(timeout=20)
    assert not done.is_alive()
    assert len(set(_ran)) == 6  # a fresh thread for each task
    assert timer.value == -1  # the process itself goes on


def test_a_task_past_its_timeout_is_left_to_its_thread_and_another_takes_its_slot(monkeypatch):
    """A thread cannot be killed, and replacing the process would end every other turn in it."""
    monkeypatch.setattr(Conf, "GUARD_CYCLE", 0.2)
    _released.clear()
    _ran.clear()
    tasks, results, timer = Queue(), Queue(), Value("f", -1)
    tasks.put(_task(_hang))
    tasks.put(_task(_note))
    pool = threading.Thread(target=thread_pool, args=(tasks, results, timer, 1, 1))  # 1 s, and django-q2's 3 s of slack
    started = time.monotonic()
    pool.start()
    try:
        (noted,) = _results(results, 1)
        assert noted["func"] is _note and noted["success"]
        assert 3.5 < time.monotonic() - started < 10
        assert timer.value == -1  # the process goes on
        tasks.put("STOP")
        pool.join(timeout=10)
        assert not pool.is_alive(), "the pool waited for the task past its timeout"
    finally:
        _released.set()


def test_a_pool_killed_while_its_threads_wait_leaves_the_queue_to_the_next(monkeypatch):
    """Its waiting threads hold none of the queue's locks, which every process of the cluster
    shares: django-q2's worker loop blocks in get() holding one."""
    tasks, results = Queue(), Queue()
    context = multiprocessing.get_context("fork")
    killed = context.Process(target=thread_pool, args=(tasks, results, Value("f", -1), None, 3), daemon=True)
    killed.start()
    time.sleep(1)  # its threads wait for a task
    killed.kill()
    killed.join()
    _ran.clear()
    tasks.put(_task(_note))
    tasks.put("STOP")
    pool = threading.Thread(target=thread_pool, args=(tasks, results, Value("f", -1), None, 2))
    pool.start()
    pool.join(timeout=10)
    assert not pool.is_alive(), "the next pool could not take a task"
    assert [task["success"] for task in _results(results, 1)] == [True]


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

        (sentinel,) = children(tree.pid)
        below = children(sentinel)
        assert len(below) == 3, f"the cluster should be the task pool, the pusher and the monitor: {below}"
        own = {tree.pid, sentinel, *below}
        spawners = {parent(pid) for request_id in runs for pid in _engine(live.data_dir, request_id)} & own
        assert len(spawners) == 1, f"the {CAP} turns ran in processes {spawners}"
        assert spawners <= set(below)

        release.touch()
        for request_id in runs:
            live.wait_for_status(token, request_id, {"waiting_user"})
    finally:
        live.stop()


def _engine(data_dir: Path, request_id: str) -> list[int]:
    return processes_in(data_dir / "runs" / request_id)
