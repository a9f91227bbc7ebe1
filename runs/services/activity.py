"""A running turn's agent activity (R-AC1): appended as run events while the turn is still its
worker's. Batching and capping the items is the worker's (worker.turn_activity)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ..events import append_events
from .claims import locked_turn_claim


def append_activity(
    request_id, attempt_number: int, worker_id: str, payloads: list[tuple[str, dict[str, Any]]]
) -> bool:
    """Append activity events while the turn is still this worker's; False once it is not."""
    with transaction.atomic():
        run = locked_turn_claim(request_id, attempt_number, worker_id)
        if run is None:
            return False
        append_events(run, payloads)
    return True
