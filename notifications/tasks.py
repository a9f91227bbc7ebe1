"""django-q2 entry points (named in `task_queue.py`): each hands its row to a sender thread."""

from __future__ import annotations

from . import email, services
from .sender import sender


def send_webhook(delivery_pk: int) -> None:
    sender.submit(services.attempt_delivery, delivery_pk)


def email_question(email_pk: int) -> None:
    sender.submit(email.attempt_question_email, email_pk)
