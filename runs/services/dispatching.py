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
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Min, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from kernel.compiled import CompiledQuery, PreparedQuery

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

# An owner's place among those holding as many slots (R-FS1): the owner served least recently
# first (one never served first of all), then by their oldest ready run.
TURN_ORDER = ("last_served_at", "oldest_ready_at", "owner_id")


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
    places: list[Place]  # the holders', and those of the first `free` owners holding none

    @property
    def free(self) -> int:
        return settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - self.in_use


def ready_runs():
    return Run.objects.filter(status=RunStatus.QUEUED, awaiting_upload=False)


def dispatch_state() -> DispatchState:
    """What choosing the next turns needs, in one statement (R-SC1: a bounded number of rows):
    the slots in use; the places of the first owners holding none, in turn order, as many as
    there are free slots (only they can be given one); the places of the owners holding some; and
    for each place its oldest ready run, found by the place's own time. Without a place nobody is
    waiting, and how many slots are in use does not matter."""
    cap = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS
    if cap <= 0:
        return DispatchState(0, [])
    rows = DISPATCH_READ.rows(cap)
    in_use = rows[0][-1] if rows else 0
    places = [
        Place(owner, holding, served, oldest_at, count, Turn(first, attempt, offered) if first else None)
        for owner, holding, served, oldest_at, count, first, attempt, offered, _ in rows
    ]
    return DispatchState(in_use, places)


def _dispatch_read(cap: int) -> QuerySet[Any, Any]:
    holders = Run.objects.filter(holds_slot=True).order_by().values("owner_id")
    held_by = holders.filter(owner_id=OuterRef("owner_id")).values("owner_id").annotate(n=Count("pk")).values("n")
    in_use = holders.values("holds_slot").annotate(n=Count("pk")).values("n")
    # Ordered so that its three columns come from one run, should two share a creation time.
    oldest = ready_runs().filter(owner_id=OuterRef("owner_id"), created_at=OuterRef("oldest_ready_at"))
    oldest = oldest.order_by("request_id")
    return (
        ready_places()
        .filter(Q(owner_id__in=_first_idle_owners(cap, holders)) | Q(owner_id__in=holders))
        .order_by(*TURN_ORDER)  # as _in_order takes them
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


def _first_idle_owners(cap: int, holders: QuerySet[Any, Any]) -> RawSQL:
    """The owners with a ready run and no slot, in turn order, as many as there are free slots.
    Every owner holding no slot comes before any holding one (_in_order), so only these can be
    given a slot. Django's LIMIT is a number, so the subquery, compiled by Django, gets one that
    counts the free slots in the same statement: limited to the cap instead, the read returned 16
    idle owners' places with their oldest runs beside 200 owners waiting, against one on an empty
    service, for the one slot a release frees: the dispatch took 1.15-1.26 x as long (R-SC1).
    Never negative: SQLite reads a negative LIMIT as none."""
    idle, idle_params = (
        ready_places().exclude(owner_id__in=holders).order_by(*TURN_ORDER).values("owner_id").query.sql_with_params()
    )
    held, held_params = holders.query.sql_with_params()
    free = f"%s - (SELECT COUNT(*) FROM ({held}) held)"
    return RawSQL(
        f"{idle} LIMIT CASE WHEN {free} > 0 THEN {free} ELSE 0 END",
        (*idle_params, cap, *held_params, cap, *held_params),
    )


# Django compiles the dispatch read (five subqueries) in milliseconds, a hundred times what the
# database takes to run it; its SQL is the same for a given cap.
DISPATCH_READ = CompiledQuery(_dispatch_read)


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
    created = _datetime_param(run.created_at)
    joined = _update_place(
        "ready_count = ready_count + 1,"
        " oldest_ready_at = CASE WHEN oldest_ready_at < %s THEN oldest_ready_at ELSE %s END",
        [created, created, run.owner_id],
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
    runs = connection.ops.quote_name(Run._meta.db_table)
    served = _update_place(
        # Every expression reads the row as it was: `ready_count` is the count before this one left.
        "last_served_at = %s, ready_count = CASE WHEN ready_count > 0 THEN ready_count - 1 ELSE 0 END,"
        " oldest_ready_at = CASE WHEN ready_count <= 1 THEN NULL ELSE COALESCE("
        f"(SELECT created_at FROM {runs} WHERE owner_id = %s AND status = %s AND NOT awaiting_upload"
        " ORDER BY created_at LIMIT 1), oldest_ready_at) END",
        [_datetime_param(timezone.now()), run.owner_id, RunStatus.QUEUED.value, run.owner_id],
    )
    if not served:
        owner_queue_changed(run.owner_id)
        OwnerQueue.objects.filter(owner_id=run.owner_id).update(last_served_at=timezone.now())


def _update_place(assignments: str, params: list[Any]) -> int:
    """UPDATE of one owner's place (the owner id last in `params`), written out: Django compiled
    these updates in longer than the database runs them. Returns the rows changed."""
    with connection.cursor() as cursor:
        table = connection.ops.quote_name(OwnerQueue._meta.db_table)
        cursor.execute(f"UPDATE {table} SET {assignments} WHERE owner_id = %s", params)
        return cursor.rowcount


def _datetime_param(value: datetime) -> Any:
    return OwnerQueue._meta.get_field("oldest_ready_at").get_db_prep_value(value, connection)


def ready_places() -> QuerySet[OwnerQueue]:
    """The places of owners with a ready run (each counts its owner's, `ready_count`): one row
    per such owner, however long the queue."""
    return OwnerQueue.objects.filter(oldest_ready_at__isnull=False)


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
    turn_order = operator.attrgetter(*TURN_ORDER)
    # Every owner holding no slot comes before any holding one, so only the first `free` matter:
    # dispatch_state keeps no more of them.
    idle = [place for place in state.places if not place.holding]
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
    # The LIMIT is compiled into the statement, so each limit is a statement of its own. Rounded
    # up to a power of two, a process compiles five at cap 16, not one per number of free slots:
    # sixteen, whose compiling was an eighth of the web's CPU in a fresh service's first burst.
    compiled_limit = 1 << (limit - 1).bit_length()
    return [Turn(*row) for row in _OLDEST_READY_RUNS.rows(owner, key=(compiled_limit,))[:limit]]


# Read at most dispatches, for an owner given a slot: compiled once per process and rounded limit.
_OLDEST_READY_RUNS = PreparedQuery(
    lambda limit, owner: (
        ready_runs()
        .filter(owner_id=owner)
        .order_by("created_at")
        .values_list("request_id", "attempt_number", "offered_at")[:limit]
    ),
    Run._meta.get_field("owner"),
)


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
    # Written out, as the places' updates are: Django compiled it in 0.1 ms more than this takes,
    # on each run's creation and each freed slot.
    read = "offered_at IS NULL" if offered_at is None else "offered_at = %s"
    params = [_datetime_param(now), Run._meta.pk.get_db_prep_value(request_id, connection), RunStatus.QUEUED.value]
    params += [] if offered_at is None else [_datetime_param(offered_at)]
    with connection.cursor() as cursor:
        runs = connection.ops.quote_name(Run._meta.db_table)
        cursor.execute(f"UPDATE {runs} SET offered_at = %s WHERE request_id = %s AND status = %s AND {read}", params)
        return cursor.rowcount == 1


def may_take_slot(run: Run) -> bool:
    """Whether `run` (queued, not holding a slot) may start now (R-LC8, R-FS1): it is one of the
    turns next_turns gives the free slots, so its owner is under the per-user cap and no owner
    ahead in the order is owed the slot: a redelivered or stale task cannot jump the order."""
    state = dispatch_state()
    return state.free > 0 and any(turn.request_id == run.pk for turn in _in_order(state))
