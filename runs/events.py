"""Appending run events (R-UI1) and waking whoever listens once they are committed."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from .models import Run, RunEvent

logger = logging.getLogger(__name__)


def group_name(request_id) -> str:
    return f"run-{request_id}"


def user_group_name(user_id) -> str:
    """Listeners to all of one user's runs: the inbox badge (R-NT4)."""
    return f"user-{user_id}"


def append_event(run: Run, kind: str, payload: dict[str, Any]) -> RunEvent:
    """Call inside the transaction that changes `run`, with the run row locked."""
    run.last_event_seq += 1
    event = RunEvent.objects.create(run=run, seq=run.last_event_seq, kind=kind, payload=payload)
    Run.objects.filter(pk=run.pk).update(last_event_seq=run.last_event_seq)
    transaction.on_commit(lambda: notify_run_changed(run.pk, run.owner_id))
    return event


def notify_run_changed(request_id, owner_id) -> None:
    """Wake listeners in other processes. Best effort: they also re-read the table now and then.

    Without a cross-process layer each web process watches the event table itself (runs.live).
    """
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return
    try:
        for group in (group_name(request_id), user_group_name(owner_id)):
            async_to_sync(layer.group_send)(group, {"type": "run.changed"})
    except Exception:  # a broken channel layer must never fail a state change
        logger.warning("could not publish run change for %s", request_id, exc_info=True)
