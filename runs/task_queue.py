"""The task queue: engine turns handed to the django-q2 cluster. Which queued run gets a free
slot is decided before, by `services.dispatching`. (Other apps enqueue their own tasks:
`notifications.task_queue`.)"""

from __future__ import annotations

from django_q.tasks import async_task

from processes.queue_broker import this_process_broker

TURN_TASK = "worker.tasks.execute_turn"


def enqueue_turn(request_id, attempt_number: int) -> None:
    task_name = f"turn-{request_id}-{attempt_number}"
    async_task(TURN_TASK, str(request_id), attempt_number, task_name=task_name, broker=this_process_broker())
