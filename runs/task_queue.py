"""The task queue: engine turns, webhook deliveries and question emails handed to the django-q2
cluster. Which queued run gets a free slot is decided before, by `services.dispatching`."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

from django_q.conf import Conf
from django_q.tasks import async_task

TURN_TASK = "runs.tasks.execute_turn"
DELIVERY_TASK = "runs.tasks.send_webhook"
QUESTION_EMAIL_TASK = "runs.tasks.send_question_email"

# A webhook delivery is enqueued on each attempt that falls due, and the supervisor's tick looks
# for due attempts every second: a process enqueues one delivery at most once per window, so a
# delivery waiting in the task queue is not enqueued again. (Turns are offered once across all
# processes instead: services.dispatching.)
REOFFER_AFTER_SECONDS = 2.0
_offered: dict[Hashable, float] = {}
_offered_lock = threading.Lock()


def recently_offered(key: Hashable) -> bool:
    """Whether `key` (a webhook delivery) was offered within the window; marks it offered if not."""
    now = time.monotonic()
    with _offered_lock:
        if now - _offered.get(key, float("-inf")) < REOFFER_AFTER_SECONDS:
            return True
        _offered[key] = now
        if len(_offered) > 4096:
            for stale in [k for k, at in _offered.items() if now - at >= REOFFER_AFTER_SECONDS]:
                del _offered[stale]
        return False


def runs_tasks_inline() -> bool:
    """A synchronous cluster (in-process tests) runs a task inside async_task: nothing is pending."""
    return bool(Conf.SYNC)


def _enqueue_once(key: Hashable, func: str, *args, task_name: str, **options) -> None:
    if not runs_tasks_inline() and recently_offered(key):
        return
    try:
        async_task(func, *args, task_name=task_name, **options)
    except Exception:
        with _offered_lock:
            _offered.pop(key, None)  # not enqueued: the next dispatch must try again
        raise


def enqueue_turn(request_id, attempt_number: int) -> None:
    async_task(TURN_TASK, str(request_id), attempt_number, task_name=f"turn-{request_id}-{attempt_number}")


def enqueue_delivery(delivery_pk: int) -> None:
    """A webhook delivery task: it hands the attempt to a sender thread and returns at once."""
    _enqueue_once(("webhook", delivery_pk), DELIVERY_TASK, delivery_pk, task_name=f"webhook-{delivery_pk}")


def enqueue_question_email(interaction_pk: int) -> None:
    async_task(QUESTION_EMAIL_TASK, interaction_pk, task_name=f"question-email-{interaction_pk}")
