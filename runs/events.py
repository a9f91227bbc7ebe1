"""Appending run events (R-UI1) and waking whoever listens once they are committed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from kernel.compiled import field_and_column
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
    _insert(events)
    owner_id = run.owner_id if any(event.kind == "status" for event in events) else None
    transaction.on_commit(lambda: notify_run_changed(run.pk, owner_id))


# A state change's one to three events, written out: bulk_create built the statement for them in
# 0.1 ms more than this takes, on each run's creation and twice in each turn (issue #43). Each
# value is prepared by its field, as bulk_create prepares it; the events' ids are not read back.
_FIELDS, _COLUMNS = zip(
    *(field_and_column(RunEvent, name) for name in ("run", "seq", "kind", "payload", "created_at")), strict=True
)
_INSERT_INTO = "INSERT INTO {} ({}) VALUES ".format(
    connection.ops.quote_name(RunEvent._meta.db_table), ", ".join(map(connection.ops.quote_name, _COLUMNS))
)
_ROW = f"({', '.join(['%s'] * len(_FIELDS))})"


def _insert(events: list[RunEvent]) -> None:
    values = []
    for event in events:
        event.created_at = timezone.now()  # auto_now_add: each its own time, as bulk_create gives them
        values += [field.get_db_prep_save(getattr(event, field.attname), connection) for field in _FIELDS]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_INTO + ", ".join([_ROW] * len(events)), values)


def notify_run_changed(request_id, owner_id=None) -> None:
    """Wake listeners in other processes. Best effort: they also re-read the table now and then.

    `owner_id` is given for a status change, which also wakes the owner's user-level listeners.
    Without a cross-process layer each web process watches the event table itself (live.watcher).
    """
    messages = [(group_name(request_id), {"type": "run.changed"})]
    if owner_id is not None:
        messages.append((user_group_name(owner_id), {"type": "run.changed"}))
    send_to_groups(messages)
