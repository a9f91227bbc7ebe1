"""Offering queued runs to the task queue, as many as there are free slots (R-LC8), shared fairly
between owners (R-FS1): owners holding fewer slots first, then the owner served least recently,
each under its per-user slot cap; at a cost that does not grow with the backlog (R-SC1)."""

from __future__ import annotations

import heapq
import itertools
import logging
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Min, QuerySet, Sum
from django.utils import timezone

from .. import task_queue
from ..models import OwnerQueue, Run, RunStatus

logger = logging.getLogger(__name__)

# `dispatch_queued_runs` runs on every run created, every slot released and every supervisor tick,
# in the web process and in every cluster worker, and each time picks the same oldest queued runs
# for the free slots. Each duplicate task costs a cluster worker a whole round (dequeue, claim
# transaction, acknowledgement) ahead of the useful ones: a 50-run burst at cap 16 made 407 turn
# tasks that found nothing to claim beside 65 that ran. So one process at a time offers a queued
# run (`Run.offered_at`, set by compare-and-set) and nobody offers it again within REOFFER_AFTER,
# unless that task is used up first: one that finds no slot clears the offer (claims), so the next
# release offers the run again at once; so does a task the broker refused. Only a task lost on the
# way waits out the window (the supervisor's tick offers it again then). A run newly queued is
# offered at once.
REOFFER_AFTER = timedelta(seconds=2)


class Turn(NamedTuple):
    request_id: uuid.UUID
    attempt_number: int
    offered_at: datetime | None


def slots_held_by_owner() -> Counter[int]:
    """Slots in use per owner: running turns and waits that keep their process. Unordered, so
    read from the partial index runs_run_slot_holders (ordered by creation, SQLite scanned every
    run instead)."""
    return Counter(Run.objects.filter(holds_slot=True).order_by().values_list("owner_id", flat=True))


def ready_runs():
    return Run.objects.filter(status=RunStatus.QUEUED, awaiting_upload=False)


def owner_queue_changed(owner_id: int, *, served: bool = False) -> None:
    """Keep the owner's place in the dispatch order (OwnerQueue) true: called inside every
    transaction that puts one of their runs in the ready queue or takes one out, `served` when
    that run took a slot to start its turn. Their row is locked before their runs are read, so
    of two such transactions for one owner the second reads what the first committed."""
    place, _ = OwnerQueue.objects.select_for_update().get_or_create(owner_id=owner_id)
    # At most the per-user queue cap of rows, from runs_run_ready_by_owner.
    ready = ready_runs().filter(owner_id=owner_id).aggregate(oldest=Min("created_at"), count=Count("pk"))
    if served or (place.oldest_ready_at, place.ready_count) != (ready["oldest"], ready["count"]):
        place.oldest_ready_at, place.ready_count = ready["oldest"], ready["count"]
        if served:  # it goes behind the owners waiting longer (R-FS1)
            place.last_served_at = timezone.now()
        place.save(update_fields=["oldest_ready_at", "ready_count", "last_served_at"])


def ready_places() -> QuerySet[OwnerQueue]:
    """The places of owners with a ready run (each counts its owner's, `ready_count`): one row
    per such owner, however long the queue."""
    return OwnerQueue.objects.filter(oldest_ready_at__isnull=False)


def ready_queue_length() -> int:
    """How many runs are ready to dispatch, from the owners' places."""
    return ready_places().aggregate(length=Sum("ready_count"))["length"] or 0


def run_became_ready(run: Run) -> None:
    """Inside the transaction where a queued run's upload (its inputs, or its skill) arrived: its
    owner's place counts it, and it is offered to a slot once that commits."""
    owner_queue_changed(run.owner_id)
    transaction.on_commit(dispatch_queued_runs)


def next_turns(free: int, held: Counter[int]) -> list[Turn]:
    """Up to `free` queued runs, in the order their owners get the free slots (R-FS1): owners
    holding fewer slots first, then the owner served least recently (one never served first,
    ties by oldest ready run). An owner given a slot holds one more and was served last, so goes
    behind the others; each owner's runs go oldest first, never beyond the per-user cap.

    It reads a bounded number of rows (R-SC1): the slot holders' places, the first `free` places
    of owners holding none (from OwnerQueue's turn-order index), and, for each owner given a
    slot, its oldest ready runs up to what it may take (from runs_run_ready_by_owner). Checked
    with SQLite's EXPLAIN QUERY PLAN and PostgreSQL's EXPLAIN at 10,000 queued runs of 200
    owners: both are index scans under their LIMIT, neither reads the queue (`python -m
    bench.dispatchcost --explain` prints the plans)."""
    return list(_in_order(free, held))


def _in_order(free: int, held: Counter[int]) -> Iterator[Turn]:
    """next_turns' turns one at a time, reading each owner's runs only when its turn comes: a
    caller that looks for one run (may_take_slot) stops reading once it is found."""
    cap = settings.SKILLRUNNER_USER_MAX_RUNNING
    places = sorted(_places(free, held), key=lambda place: (place[1], place[2], place[0]))
    # (slots held, rank among those holding as many, owner); an owner given a slot ranks last.
    order = [(held[owner], rank, owner) for rank, (owner, _, _) in enumerate(places)]
    heapq.heapify(order)
    later = itertools.count(len(order))
    runs: dict[int, deque[Turn]] = {}
    given = 0
    while order and given < free:
        holding, _, owner = heapq.heappop(order)
        if owner not in runs:
            runs[owner] = deque(_oldest_ready_runs(owner, min(cap - holding, free)))
            if not runs[owner]:
                # Its runs left the queue since its place was read, or were changed behind the
                # services' back: the place is put right for the next dispatch.
                with transaction.atomic():
                    owner_queue_changed(owner)
        if runs[owner]:
            yield runs[owner].popleft()
            given += 1
        if runs[owner]:  # none was read beyond its cap: it has room for the next
            heapq.heappush(order, (holding + 1, next(later), owner))


def _places(free: int, held: Counter[int]) -> list[tuple[int, datetime, datetime]]:
    """Owners with ready runs who may take a slot: (owner, last served, oldest ready run)."""
    waiting = OwnerQueue.objects.filter(oldest_ready_at__isnull=False)
    fields = ("owner_id", "last_served_at", "oldest_ready_at")
    # Every owner holding no slot comes before any holding one, so only the first `free` matter.
    idle = waiting.exclude(owner_id__in=list(held)).order_by("last_served_at", "oldest_ready_at", "owner_id")
    places = list(idle.values_list(*fields)[:free])
    holding = [owner for owner, count in held.items() if count < settings.SKILLRUNNER_USER_MAX_RUNNING]
    if holding:
        places += waiting.filter(owner_id__in=holding).values_list(*fields)
    return places


def _oldest_ready_runs(owner: int, limit: int) -> list[Turn]:
    runs = ready_runs().filter(owner_id=owner).order_by("created_at")
    return [Turn(*row) for row in runs.values_list("request_id", "attempt_number", "offered_at")[:limit]]


def dispatch_queued_runs() -> int:
    """Enqueue a turn for as many queued runs as there are free slots, each run not offered by
    any process within REOFFER_AFTER; returns how many were enqueued. A duplicate would still be
    harmless, because a turn only starts after `claim_turn` wins."""
    held = slots_held_by_owner()
    free = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - sum(held.values())
    if free <= 0:
        return 0
    enqueued = 0
    for turn in next_turns(free, held):
        if not _take_offer(turn.request_id, turn.offered_at):
            continue
        try:
            task_queue.enqueue_turn(turn.request_id, turn.attempt_number)
        except Exception:  # broker away: the run stays queued and the supervisor dispatches it later
            logger.warning("could not enqueue run %s; the supervisor will retry", turn.request_id, exc_info=True)
            # Not enqueued: the next dispatch offers it at once, not after the window.
            Run.objects.filter(pk=turn.request_id).update(offered_at=None)
            return enqueued
        enqueued += 1
    return enqueued


def _take_offer(request_id, offered_at) -> bool:
    """Whether this process offers the run now: nobody did within REOFFER_AFTER, and this process
    is the one whose compare-and-set of `offered_at` (from the value it read) succeeds."""
    now = timezone.now()
    if offered_at is not None and now - offered_at < REOFFER_AFTER:
        return False
    taken = Run.objects.filter(pk=request_id, status=RunStatus.QUEUED, offered_at=offered_at).update(offered_at=now)
    return taken == 1


def may_take_slot(run: Run) -> bool:
    """Whether `run` (queued, not holding a slot) may start now (R-LC8, R-FS1): it is one of the
    turns next_turns gives the free slots, so its owner is under the per-user cap and no owner
    ahead in the order is owed the slot: a redelivered or stale task cannot jump the order."""
    held = slots_held_by_owner()
    free = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - sum(held.values())
    return free > 0 and any(turn.request_id == run.pk for turn in _in_order(free, held))
