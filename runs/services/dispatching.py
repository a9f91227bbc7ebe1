"""Offering queued runs to the task queue, as many as there are free slots (R-LC8), shared fairly
between owners (R-FS1): owners holding fewer slots first, then the owner served least recently,
each under its per-user slot cap; at a cost that does not grow with the backlog (R-SC1)."""

from __future__ import annotations

import heapq
import itertools
import logging
import operator
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import Case, Count, DateTimeField, F, Min, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest, Least
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


class Place(NamedTuple):
    """An owner with ready runs who may take a slot, as dispatch_state reads it."""

    owner_id: int
    holding: int  # slots the owner holds
    last_served_at: datetime
    oldest_ready_at: datetime
    ready_count: int
    first: Turn | None  # the ready run `oldest_ready_at` names, when it still names one


class DispatchState(NamedTuple):
    in_use: int  # slots held, by every owner
    places: list[Place]

    @property
    def free(self) -> int:
        return settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - self.in_use


def ready_runs():
    return Run.objects.filter(status=RunStatus.QUEUED, awaiting_upload=False)


def dispatch_state() -> DispatchState:
    """What choosing the next turns needs, in one statement (R-SC1: a bounded number of rows):
    the slots in use; the places of the first owners holding none, in turn order, as many as
    there are slots (only the first free ones can be given one); the places of the owners holding
    some; and for each place its oldest ready run, found by the place's own time. Without a place
    nobody is waiting, and how many slots are in use does not matter."""
    cap = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS
    if cap <= 0:
        return DispatchState(0, [])
    holders = Run.objects.filter(holds_slot=True).order_by().values("owner_id")
    waiting = OwnerQueue.objects.filter(oldest_ready_at__isnull=False)
    first_idle = waiting.exclude(owner_id__in=holders).order_by("last_served_at", "oldest_ready_at", "owner_id")
    held_by = holders.filter(owner_id=OuterRef("owner_id")).values("owner_id").annotate(n=Count("pk")).values("n")
    in_use = holders.values("holds_slot").annotate(n=Count("pk")).values("n")
    # Ordered so that its three columns come from one run, should two share a creation time.
    oldest = ready_runs().filter(owner_id=OuterRef("owner_id"), created_at=OuterRef("oldest_ready_at"))
    oldest = oldest.order_by("request_id")
    rows = (
        waiting.filter(Q(owner_id__in=first_idle.values("owner_id")[:cap]) | Q(owner_id__in=holders))
        .annotate(
            holding=Coalesce(Subquery(held_by), 0),
            in_use=Coalesce(Subquery(in_use), 0),
            first_id=Subquery(oldest.values("request_id")[:1]),
            first_attempt=Subquery(oldest.values("attempt_number")[:1]),
            first_offered_at=Subquery(oldest.values("offered_at")[:1]),
        )
        .values_list(
            "owner_id",
            "holding",
            "last_served_at",
            "oldest_ready_at",
            "ready_count",
            "first_id",
            "first_attempt",
            "first_offered_at",
            "in_use",
        )
    )
    places = [
        Place(owner, holding, served, oldest_at, count, Turn(first, attempt, offered) if first else None)
        for owner, holding, served, oldest_at, count, first, attempt, offered, _ in rows
    ]
    return DispatchState(rows[0][-1] if rows else 0, places)


def owner_queue_changed(owner_id: int) -> None:
    """Keep the owner's place in the dispatch order (OwnerQueue) true: called inside every
    transaction that puts one of their runs in the ready queue or takes one out (but a new run
    and a run taking a slot, which have their own: run_joined_queue, run_took_slot). Their row is
    locked before their runs are read, so of two such transactions for one owner the second
    reads what the first committed."""
    place, _ = OwnerQueue.objects.select_for_update().get_or_create(owner_id=owner_id)
    # At most the per-user queue cap of rows, from runs_run_ready_by_owner.
    ready = ready_runs().filter(owner_id=owner_id).aggregate(oldest=Min("created_at"), count=Count("pk"))
    if (place.oldest_ready_at, place.ready_count) != (ready["oldest"], ready["count"]):
        place.oldest_ready_at, place.ready_count = ready["oldest"], ready["count"]
        place.save(update_fields=["oldest_ready_at", "ready_count"])


def run_joined_queue(run: Run) -> None:
    """A new run (saved, ready) counted in its owner's place by one update, which locks the row
    itself: a change of the same place by another transaction applies before or after it on the
    row as it then is, so nothing is lost. An owner without a place gets one."""
    created = Value(run.created_at, output_field=DateTimeField())
    joined = OwnerQueue.objects.filter(owner_id=run.owner_id).update(
        ready_count=F("ready_count") + 1,
        oldest_ready_at=Coalesce(Least("oldest_ready_at", created), created),
    )
    if not joined:
        owner_queue_changed(run.owner_id)


def run_took_slot(run: Run) -> None:
    """A ready run (now running, saved) left the queue to take a slot: its owner's place counts
    one less and goes behind the owners waiting longer (R-FS1), by one update that locks the row.
    Its oldest ready run is read by that update too. On PostgreSQL that read sees what committed
    before the statement began, not a run another transaction queued while the update waited for
    the row: the count still has it then, so the place keeps its earlier time rather than none,
    and its owner stays in the order (a later time than the truth only moves them back a little
    among owners served as long ago, until the place's next change)."""
    next_oldest = ready_runs().filter(owner_id=run.owner_id).order_by("created_at").values("created_at")[:1]
    served = OwnerQueue.objects.filter(owner_id=run.owner_id).update(
        last_served_at=timezone.now(),
        ready_count=Greatest(F("ready_count") - 1, 0),
        oldest_ready_at=Case(
            When(ready_count__lte=1, then=Value(None)),
            default=Coalesce(Subquery(next_oldest), F("oldest_ready_at")),
        ),
    )
    if not served:
        owner_queue_changed(run.owner_id)
        OwnerQueue.objects.filter(owner_id=run.owner_id).update(last_served_at=timezone.now())


def ready_queue_length() -> int:
    """How many runs are ready to dispatch, from the owners' places: one row per owner with a
    ready run, however long the queue."""
    return sum(row["n"] or 0 for row in ready_queue_length_query())  # one row


def ready_queue_length_query():
    """ready_queue_length as a query of one value, for a caller that reads it with other things."""
    waiting = OwnerQueue.objects.filter(oldest_ready_at__isnull=False).order_by()
    return waiting.annotate(whole_queue=Value(1)).values("whole_queue").annotate(n=Sum("ready_count")).values("n")


def run_became_ready(run: Run) -> None:
    """Inside the transaction where a queued run's upload (its inputs, or its skill) arrived: its
    owner's place counts it, and it is offered to a slot once that commits."""
    owner_queue_changed(run.owner_id)
    transaction.on_commit(dispatch_queued_runs)


def next_turns(state: DispatchState) -> list[Turn]:
    """Up to `state.free` queued runs, in the order their owners get the free slots (R-FS1):
    owners holding fewer slots first, then the owner served least recently (one never served
    first, ties by oldest ready run). An owner given a slot holds one more and was served last,
    so goes behind the others; each owner's runs go oldest first, never beyond the per-user cap.

    It reads a bounded number of rows (R-SC1): dispatch_state, and only for an owner given more
    than one slot (or whose place's time names no ready run) its oldest ready runs up to what it
    may take (from runs_run_ready_by_owner). Checked with SQLite's EXPLAIN QUERY PLAN and
    PostgreSQL's EXPLAIN at 10,000 queued runs of 200 owners: both are index scans under their
    LIMIT, neither reads the queue (`python -m bench.dispatchcost --explain` prints the plans)."""
    return list(_in_order(state))


def _in_order(state: DispatchState) -> Iterator[Turn]:
    """next_turns' turns one at a time, reading an owner's runs only when its turn comes: a
    caller that looks for one run (may_take_slot) stops reading once it is found."""
    cap = settings.SKILLRUNNER_USER_MAX_RUNNING
    free = state.free
    turn_order = operator.attrgetter("last_served_at", "oldest_ready_at", "owner_id")
    # Every owner holding no slot comes before any holding one, so only the first `free` matter.
    idle = sorted((place for place in state.places if not place.holding), key=turn_order)[:free]
    holding = [place for place in state.places if 0 < place.holding < cap]
    # (slots held, rank among those holding as many, owner); an owner given a slot ranks last.
    order = [(place.holding, rank, place) for rank, place in enumerate(sorted(idle + holding, key=turn_order))]
    heapq.heapify(order)
    later = itertools.count(len(order))
    runs: dict[int, deque[Turn]] = {}
    given: Counter[int] = Counter()
    read: set[int] = set()  # owners whose runs were read, as many as they may take
    while order and sum(given.values()) < free:
        holding_now, _, place = heapq.heappop(order)
        owner = place.owner_id
        queued = runs.setdefault(owner, deque([place.first] if place.first else []))
        allowance = min(cap - place.holding, free)
        if not queued and owner not in read:
            read.add(owner)
            taken = {place.first.request_id} if place.first else set()  # the one run given it yet, if any
            queued.extend(turn for turn in _oldest_ready_runs(owner, allowance) if turn.request_id not in taken)
            if not queued and not given[owner]:
                # Its runs left the queue since its place was read, or were changed behind the
                # services' back: the place is put right for the next dispatch.
                with transaction.atomic():
                    owner_queue_changed(owner)
        if not queued:
            continue
        given[owner] += 1
        yield queued.popleft()
        # Never beyond the per-user cap; more runs of theirs are known, or may be read.
        if given[owner] < allowance and (queued or (owner not in read and given[owner] < place.ready_count)):
            heapq.heappush(order, (holding_now + 1, next(later), place))


def _oldest_ready_runs(owner: int, limit: int) -> list[Turn]:
    runs = ready_runs().filter(owner_id=owner).order_by("created_at")
    return [Turn(*row) for row in runs.values_list("request_id", "attempt_number", "offered_at")[:limit]]


def dispatch_queued_runs() -> int:
    """Enqueue a turn for as many queued runs as there are free slots, each run not offered by
    any process within REOFFER_AFTER; returns how many were enqueued. A duplicate would still be
    harmless, because a turn only starts after `claim_turn` wins."""
    state = dispatch_state()
    if state.free <= 0:
        return 0
    enqueued = 0
    for turn in _in_order(state):
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
    state = dispatch_state()
    return state.free > 0 and any(turn.request_id == run.pk for turn in _in_order(state))
