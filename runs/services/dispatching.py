"""Offering queued runs to the task queue, as many as there are free slots (R-LC8), shared fairly
between owners (R-FS1): round-robin by owner, each under its per-user slot cap."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from itertools import chain, zip_longest

from django.conf import settings
from django.utils import timezone

from .. import dispatch
from ..models import Run, RunStatus

logger = logging.getLogger(__name__)

# `dispatch_queued_runs` runs on every run created, every slot released and every supervisor tick,
# in the web process and in every cluster worker, and each time picks the same oldest queued runs
# for the free slots. Each duplicate task costs a cluster worker a whole round (dequeue, claim
# transaction, acknowledgement) ahead of the useful ones: a 50-run burst at cap 16 made 407 turn
# tasks that found nothing to claim beside 65 that ran. So one process at a time offers a queued
# run (`Run.offered_at`, set by compare-and-set) and nobody offers it again within REOFFER_AFTER,
# unless that task is used up first: one that finds no slot clears the offer (claims), so the next
# release offers the run again at once. Only a task lost on the way waits out the window (the
# supervisor's tick offers it again then). A run newly queued is offered at once.
REOFFER_AFTER = timedelta(seconds=2)


def slots_held_by_owner() -> Counter[int]:
    """Slots in use per owner: running turns and waits that keep their process."""
    return Counter(Run.objects.filter(holds_slot=True).values_list("owner_id", flat=True))


def ready_runs():
    return Run.objects.filter(status=RunStatus.QUEUED, awaiting_upload=False)


def next_turns(free: int, held: Counter[int]) -> list[tuple]:
    """Up to `free` queued runs (request id, attempt, offered at), one per owner in turn: owners
    holding fewer slots first, then the one waiting longest; each owner's runs oldest first, never
    beyond its per-user cap."""
    cap = settings.SKILLRUNNER_USER_MAX_RUNNING
    by_owner: dict[int, list[tuple]] = {}
    for request_id, attempt_number, owner_id, offered_at in (
        ready_runs().order_by("created_at").values_list("request_id", "attempt_number", "owner_id", "offered_at")
    ):
        room = cap - held[owner_id]
        queue = by_owner.setdefault(owner_id, [])
        if len(queue) < min(room, free):
            queue.append((request_id, attempt_number, offered_at))
    owners = sorted(by_owner, key=lambda owner: held[owner])  # stable: oldest waiting first among equals
    rounds = zip_longest(*(by_owner[owner] for owner in owners))
    return [turn for turn in chain.from_iterable(rounds) if turn is not None][:free]


def dispatch_queued_runs() -> int:
    """Enqueue a turn for as many queued runs as there are free slots, each run not offered by
    any process within REOFFER_AFTER; returns how many were enqueued. A duplicate would still be
    harmless, because a turn only starts after `claim_turn` wins."""
    held = slots_held_by_owner()
    free = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - sum(held.values())
    if free <= 0:
        return 0
    enqueued = 0
    for request_id, attempt_number, offered_at in next_turns(free, held):
        if not dispatch.runs_tasks_inline() and not _take_offer(request_id, offered_at):
            continue
        try:
            # Looked up on the module at call time, so tests can stand in for the task queue.
            dispatch.enqueue_turn(request_id, attempt_number)
        except Exception:  # broker away: the run stays queued and the supervisor dispatches it later
            logger.warning("could not enqueue run %s; the supervisor will retry", request_id, exc_info=True)
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
    """Whether `run` (queued, not holding a slot) may start now (R-LC8, R-FS1): a slot is free,
    its owner is under the per-user cap, and the free slots are not all owed to owners holding
    fewer slots whose runs wait (a redelivered or stale task cannot jump the round-robin)."""
    held = slots_held_by_owner()
    free = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - sum(held.values())
    mine = held[run.owner_id]
    if free <= 0 or mine >= settings.SKILLRUNNER_USER_MAX_RUNNING:
        return False
    if mine == 0:
        return True
    others = ready_runs().exclude(owner_id=run.owner_id).values_list("owner_id", flat=True).distinct()
    owed = sum(1 for owner in set(others) if held[owner] < mine)
    return free > owed
