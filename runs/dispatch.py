"""Handing engine turns to the django-q2 cluster."""

from __future__ import annotations

from django_q.tasks import async_task

TURN_TASK = "runs.tasks.execute_turn"


def enqueue_turn(request_id, attempt_number: int) -> None:
    async_task(TURN_TASK, str(request_id), attempt_number, task_name=f"turn-{request_id}-{attempt_number}")
