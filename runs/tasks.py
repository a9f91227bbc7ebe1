"""django-q2 entry points: thin wrappers over the orchestrator."""

from __future__ import annotations

from .execution import run_claimed_turn
from .notifications import email
from .notifications.sender import sender


def execute_turn(request_id: str, attempt_number: int) -> None:
    run_claimed_turn(request_id, attempt_number)


def send_webhook(delivery_pk: int) -> None:
    sender.submit(delivery_pk)


def send_question_email(interaction_pk: int) -> None:
    email.send_question_email(interaction_pk)
