"""Webhook deliveries and question emails handed to the django-q2 cluster (their entry points:
`tasks.py`)."""

from __future__ import annotations

import threading
import time

from django_q.tasks import async_task

from processes.queue_broker import this_process_broker

DELIVERY_TASK = "notifications.tasks.send_webhook"
QUESTION_EMAIL_TASK = "notifications.tasks.email_question"

# An outbox row (outbox.py) is enqueued on each attempt that falls due, and the supervisor's tick
# looks for due attempts every second: a process enqueues one row at most once per window, so a
# row waiting in the task queue is not enqueued again. (Turns are offered once across all
# processes instead: runs.services.dispatching.)
REOFFER_AFTER_SECONDS = 2.0
_offered: dict[tuple[str, int], float] = {}  # (task, row pk): when it was last enqueued
_offered_lock = threading.Lock()


def recently_offered(task: str, pk: int) -> bool:
    """Whether the row was offered to `task` within the window; marks it offered if not."""
    now = time.monotonic()
    with _offered_lock:
        if now - _offered.get((task, pk), float("-inf")) < REOFFER_AFTER_SECONDS:
            return True
        _offered[task, pk] = now
        if len(_offered) > 4096:
            for stale in [k for k, at in _offered.items() if now - at >= REOFFER_AFTER_SECONDS]:
                del _offered[stale]
        return False


def _enqueue_once(task: str, pk: int, task_name: str) -> None:
    if recently_offered(task, pk):
        return
    try:
        async_task(task, pk, task_name=task_name, broker=this_process_broker())
    except Exception:
        with _offered_lock:
            _offered.pop((task, pk), None)  # not enqueued: the next offer must try again
        raise


def enqueue_delivery(delivery_pk: int) -> None:
    """A webhook delivery task: it hands the attempt to a sender thread and returns at once."""
    _enqueue_once(DELIVERY_TASK, delivery_pk, f"webhook-{delivery_pk}")


def enqueue_question_email(email_pk: int) -> None:
    """A question email task (the pk of its QuestionEmail row): as a delivery, on a sender thread."""
    _enqueue_once(QUESTION_EMAIL_TASK, email_pk, f"question-email-{email_pk}")
