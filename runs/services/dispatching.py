"""Offering queued runs to the task queue, as many as there are free slots (R-LC8)."""

from __future__ import annotations

import logging

from django.conf import settings

from .. import dispatch
from ..models import Run, RunStatus

logger = logging.getLogger(__name__)


def dispatch_queued_runs() -> int:
    """Enqueue a turn for as many queued runs as there are free slots; duplicates are harmless
    because a turn only starts after `claim_turn` wins."""
    free = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - Run.objects.filter(holds_slot=True).count()
    if free <= 0:
        return 0
    ready = list(
        Run.objects.filter(status=RunStatus.QUEUED, awaiting_upload=False)
        .order_by("created_at")
        .values_list("request_id", "attempt_number")[:free]
    )
    for index, (request_id, attempt_number) in enumerate(ready):
        try:
            # Looked up on the module at call time, so tests can stand in for the task queue.
            dispatch.enqueue_turn(request_id, attempt_number)
        except Exception:  # broker away: the run stays queued and the supervisor dispatches it later
            logger.warning("could not enqueue run %s; the supervisor will retry", request_id, exc_info=True)
            return index
    return len(ready)
