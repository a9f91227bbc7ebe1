"""Webhook deliveries and question emails handed to the django-q2 cluster (their entry points:
`tasks.py`)."""

from __future__ import annotations

import threading
import time

from django_q.tasks import async_task

DELIVERY_TASK = "notifications.tasks.send_webhook"
QUESTION_EMAIL_TASK = "notifications.tasks.send_question_email"

# A webhook delivery is enqueued on each attempt that falls due, and the supervisor's tick looks
# for due attempts every second: a process enqueues one delivery at most once per window, so a
# delivery waiting in the task queue is not enqueued again. (Turns are offered once across all
# processes instead: runs.services.dispatching.)
REOFFER_AFTER_SECONDS = 2.0
_offered: dict[int, float] = {}  # delivery pk: when it was last enqueued
_offered_lock = threading.Lock()


def recently_offered(delivery_pk: int) -> bool:
    """Whether the delivery was offered within the window; marks it offered if not."""
    now = time.monotonic()
    with _offered_lock:
        if now - _offered.get(delivery_pk, float("-inf")) < REOFFER_AFTER_SECONDS:
            return True
        _offered[delivery_pk] = now
        if len(_offered) > 4096:
            for stale in [k for k, at in _offered.items() if now - at >= REOFFER_AFTER_SECONDS]:
                del _offered[stale]
        return False


def enqueue_delivery(delivery_pk: int) -> None:
    """A webhook delivery task: it hands the attempt to a sender thread and returns at once."""
    if recently_offered(delivery_pk):
        return
    try:
        async_task(DELIVERY_TASK, delivery_pk, task_name=f"webhook-{delivery_pk}")
    except Exception:
        with _offered_lock:
            _offered.pop(delivery_pk, None)  # not enqueued: the next offer must try again
        raise


def enqueue_question_email(interaction_pk: int) -> None:
    async_task(QUESTION_EMAIL_TASK, interaction_pk, task_name=f"question-email-{interaction_pk}")
