"""What webhook deliveries and question emails share: rows written before anything is sent, then
leased, sent and marked done by a sender, and offered again while they are not done.

A row is claimed under a row lock, which leases it (`leased_until`) and counts the attempt; the
sender sends outside any transaction and records the outcome afterwards. A sender that dies
(its worker killed, the database away) leaves the lease to lapse, and the supervisor's tick
offers the row again: at least once. A task that never ran (the broker away when it was offered,
a task queued under an old name) leaves the row due and unleased: offered again at the next tick.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypeVar

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from kernel.counters import add_to_row

from .models import PENDING, OutboxEnds, OutboxItem

Item = TypeVar("Item", bound=OutboxItem)

# The retry schedule, in units of the outbox's base setting: the first retry one unit after the
# first attempt, each wait twice the last, none longer than 720 units (6 h with a base of 30 s),
# and no attempt later than 2880 units (24 h) after the first.
MAX_WAIT_UNITS = 720
GIVE_UP_AFTER_UNITS = 2880


def lease_seconds(timeout: float) -> float:
    """How long a sender holds a row: the timeout of each network phase (connect, send, answer),
    with room. A send that outlasts its lease may be made twice: each phase would have had to come
    close to its timeout."""
    return timeout * 3 + 5


def retry_delay(attempts_made: int, unit: float) -> float | None:
    """Seconds until the next attempt after `attempts_made` failed ones; None once past the schedule."""
    waits = [min(2 ** (n - 1), MAX_WAIT_UNITS) for n in range(1, attempts_made + 1)]
    if sum(waits) > GIVE_UP_AFTER_UNITS:
        return None
    return waits[-1] * unit


def _is_due(item: OutboxItem, now: datetime) -> bool:
    return (
        item.state == PENDING
        and item.next_attempt_at <= now
        and (item.leased_until is None or item.leased_until <= now)
    )


def claim(rows: QuerySet[Item], pk: int, lease: float) -> Item | None:
    """Lock the row `pk` of `rows` and lease it for `lease` seconds if it is due; None when it is
    done, not due yet or held by a live sender. Call inside the transaction that records the
    attempt, so two senders never both hold it."""
    now = timezone.now()
    item = rows.select_for_update(of=("self",)).filter(pk=pk).first()
    if item is None or not _is_due(item, now):
        return None
    item.leased_until = now + timedelta(seconds=lease)
    item.attempt_count += 1
    item.save(update_fields=["leased_until", "attempt_count"])
    return item


def retry_or_give_up(item: OutboxItem, unit: float, *, give_up: str) -> None:
    """After a failed attempt: due again on the schedule, or in the `give_up` state past it."""
    delay = retry_delay(item.attempt_count, unit)
    if delay is None:
        item.state = give_up
    else:
        item.next_attempt_at = timezone.now() + timedelta(seconds=delay)


def save_attempt(item: OutboxItem) -> None:
    """Save a claimed row after its attempt, its lease released; if that ended it (sent, given up,
    skipped: it was pending when claimed), count its end in the same transaction. The first end
    wins: a row ended while it was sent (its webhook deleted) keeps that end, counted once, and
    `item` is reloaded to say so."""
    with transaction.atomic(savepoint=False):
        stored = type(item)._default_manager.select_for_update().filter(pk=item.pk).first()
        if stored is not None and stored.state != PENDING:
            item.refresh_from_db()
            return
        item.leased_until = None
        item.save()
        if item.state != PENDING:
            count_ends(type(item), item.state)


def count_ends(outbox: type[OutboxItem], state: str, items: int = 1) -> None:
    """Inside the transaction that moves `items` pending rows of `outbox` to `state`: the count
    GET /metrics reads (OutboxEnds), rolled back with the move if it is."""
    if items:
        add_to_row(OutboxEnds, {"outbox": outbox.OUTBOX, "state": state}, items=items)


def due(rows: QuerySet[Item], limit: int) -> list[int]:
    """Pending rows due for a (re)try and not held by a live sender, oldest due first."""
    now = timezone.now()
    return list(
        rows.filter(state=PENDING, next_attempt_at__lte=now)
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lt=now))
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
