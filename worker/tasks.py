"""django-q2 entry points: thin wrappers over the orchestrator."""

from __future__ import annotations

from .execution import run_claimed_turn


def execute_turn(request_id: str, attempt_number: int) -> None:
    run_claimed_turn(request_id, attempt_number)
