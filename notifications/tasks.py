"""django-q2 entry points (named in `task_queue.py`): thin wrappers over the sender and the email."""

from __future__ import annotations

from . import email
from .sender import sender


def send_webhook(delivery_pk: int) -> None:
    sender.submit(delivery_pk)


def send_question_email(interaction_pk: int) -> None:
    email.send_question_email(interaction_pk)
