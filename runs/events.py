"""Appending run events (R-UI1) and waking whoever listens once they are committed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from kernel.compiled import WrittenInsert
from processes.group_messages import send_to_groups

from .models import Run, RunEvent

# Events not numbered yet: (kind, payload) pairs.
Events = Sequence[tuple[str, dict[str, Any]]]


def group_name(request_id) -> str:
    return f"run-{request_id}"


def user_group_name(user_id) -> str:
    """Listeners to the status changes of all of one user's runs: the inbox badge (R-NT4)."""
    return f"user-{user_id}"


def append_event(run: Run, kind: str, payload: dict[str, Any]) -> None:
    """Call inside the transaction that changes `run`, with the run row locked."""
    append_events(run, [(kind, payload)])


def append_events(run: Run, items: Events) -> None:
    """append_event for several events at once: one update of the sequence, one insert."""
    events = number_events(run, items)
    Run.objects.filter(pk=run.pk).update(last_event_seq=run.last_event_seq)
    insert_events(run, events)


def number_events(run: Run, items: Events) -> list[RunEvent]:
    """`items` (kind, payload) as `run`'s next events, numbered but not saved yet: for a caller
    that saves the locked `run` (its last_event_seq with it) and then calls insert_events, in the
    same transaction. That spares a run's status change its own update of the sequence."""
    events = []
    for kind, payload in items:
        run.last_event_seq += 1
        events.append(RunEvent(run=run, seq=run.last_event_seq, kind=kind, payload=payload))
    return events


def insert_events(run: Run, events: list[RunEvent]) -> None:
    """Save events numbered by number_events; listeners are woken once this commits."""
    _INSERT.insert(events)
    owner_id = run.owner_id if any(event.kind == "status" for event in events) else None
    transaction.on_commit(lambda: notify_run_changed(run.pk, owner_id))


# A state change's one to three events, in one written-out statement: bulk_create built it in 0.1
# ms more, on each run's creation and twice in each turn (issue #43).
_INSERT = WrittenInsert(RunEvent, "run", "seq", "kind", "payload", "created_at")


def notify_run_changed(request_id, owner_id=None) -> None:
    """Wake listeners in other processes. Best effort: they also re-read the table now and then.

    `owner_id` is given for a status change, which also wakes the owner's user-level listeners.
    Without a cross-process layer each web process watches the event table itself (live.watcher).
    """
    messages = [(group_name(request_id), {"type": "run.changed"})]
    if owner_id is not None:
        messages.append((user_group_name(owner_id), {"type": "run.changed"}))
    send_to_groups(messages)
