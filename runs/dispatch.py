"""Handing engine turns to the django-q2 cluster."""

from __future__ import annotations

import threading
import time

from django_q.conf import Conf
from django_q.tasks import async_task

TURN_TASK = "runs.tasks.execute_turn"

# `dispatch_queued_runs` offers the oldest queued runs for the free slots on every run created,
# every slot released and every supervisor tick, so while a run waits in the task queue it is
# offered again and again. Each duplicate task costs a cluster worker a whole round (dequeue,
# claim transaction, result save, acknowledgement) ahead of the useful tasks behind it: 50 runs
# submitted at once produced up to 36 tasks for one turn and throughput fell from 13 to 4 runs/s.
# So a process enqueues one turn at most once per window. Duplicates stay harmless (claims are
# atomic) and still happen across processes; if a task was consumed without a claim (no slot
# at that instant), the run is offered again after the window, by the next release or tick.
REOFFER_AFTER_SECONDS = 2.0
_offered: dict[tuple[str, int], float] = {}
_offered_lock = threading.Lock()


def _recently_offered(key: tuple[str, int]) -> bool:
    now = time.monotonic()
    with _offered_lock:
        if now - _offered.get(key, float("-inf")) < REOFFER_AFTER_SECONDS:
            return True
        _offered[key] = now
        if len(_offered) > 4096:
            for stale in [k for k, at in _offered.items() if now - at >= REOFFER_AFTER_SECONDS]:
                del _offered[stale]
        return False


def enqueue_turn(request_id, attempt_number: int) -> None:
    # A synchronous cluster (in-process tests) runs the task right here, so nothing is pending.
    key = (str(request_id), attempt_number)
    if not Conf.SYNC and _recently_offered(key):
        return
    try:
        async_task(TURN_TASK, str(request_id), attempt_number, task_name=f"turn-{request_id}-{attempt_number}")
    except Exception:
        with _offered_lock:
            _offered.pop(key, None)  # not enqueued: the next dispatch must try again
        raise
