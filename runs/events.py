"""Appending run events (R-UI1) and waking whoever listens once they are committed."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from skillrunner.group_messages import send_to_groups

from .models import Run, RunEvent


def group_name(request_id) -> str:
    return f"run-{request_id}"


def user_group_name(user_id) -> str:
    """Listeners to the status changes of all of one user's runs: the inbox badge (R-NT4)."""
    return f"user-{user_id}"


def append_event(run: Run, kind: str, payload: dict[str, Any]) -> RunEvent:
    """Call inside the transaction that changes `run`, with the run row locked."""
    run.last_event_seq += 1
    event = RunEvent.objects.create(run=run, seq=run.last_event_seq, kind=kind, payload=payload)
    Run.objects.filter(pk=run.pk).update(last_event_seq=run.last_event_seq)
    owner_id = run.owner_id if kind == "status" else None
    transaction.on_commit(lambda: notify_run_changed(run.pk, owner_id))
    return event


def notify_run_changed(request_id, owner_id=None) -> None:
    """Wake listeners in other processes. Best effort: they also re-read the table now and then.

    `owner_id` is given for a status change, which also wakes the owner's user-level listeners.
    Without a cross-process layer each web process watches the event table itself (runs.live).
    """
    messages = [(group_name(request_id), {"type": "run.changed"})]
    if owner_id is not None:
        messages.append((user_group_name(owner_id), {"type": "run.changed"}))
    send_to_groups(messages)
