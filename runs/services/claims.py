"""A worker's hold on a run (R-LC8, R-LC13, R-LC14): claiming a turn and its slot, heartbeats,
noticing a claim ended (cancel, reaping), and recording the turn's decided outcome."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from engines.prompt import REPAIR_PROBLEMS_LISTED
from engines.types import TurnResult
from kernel.compiled import CompiledQuery, PreparedQuery, WrittenUpdate, one_or_none

from ..events import Events, insert_events, number_events
from ..models import DispatchLock, InteractiveProfile, Run, RunStatus
from ..outcome import TurnDecision
from ..repair import REPAIRING
from ..usage import record_turn_usage
from .dispatching import may_take_slot
from .interactions import open_wait
from .lifecycle import transition


def claim_turn(request_id, attempt_number: int, worker_id: str, claimed_at: datetime | None = None) -> Run | None:
    """Atomically take a queued run and a slot for one attempt (R-LC8, R-LC14); None if not ours.

    `claimed_at` names this claim: called again with the same one after an error (the worker's
    retry_while_database_away), it finds the claim it made if that was committed after all (the
    connection dropped at COMMIT, the answer lost), and returns the run. Any other delivery of the
    same task sees a claim that is not its own."""
    claimed_at = claimed_at or timezone.now()
    with transaction.atomic():
        if connection.features.has_select_for_update:
            # SQLite has no row locks and needs none here: its transactions begin IMMEDIATE,
            # holding the database's write lock from the start.
            if not _DISPATCH_LOCK.rows():
                DispatchLock.objects.select_for_update().get_or_create(pk=1)  # the row is migrated; tests may flush it
        run = _RUN_TO_CLAIM.one(request_id)
        if run is None or run.attempt_number != attempt_number or run.awaiting_upload:
            return None
        if run.status == RunStatus.RUNNING and run.claimed_by == worker_id and run.heartbeat_at == claimed_at:
            return run
        if run.status != RunStatus.QUEUED:
            return None
        if not run.holds_slot and not may_take_slot(run):
            # It stays queued, and this task is used up: the run is offered again as soon as a
            # slot frees, not only once the offer window has passed (services.dispatching).
            Run.objects.filter(pk=run.pk).update(offered_at=None)
            return None
        run.holds_slot = True
        run.claimed_by = worker_id
        run.heartbeat_at = claimed_at
        run.started_at = run.started_at or claimed_at
        repair: dict[str, Any] = {"repair_round": run.repair_round} if run.repair_round else {}
        transition(run, RunStatus.RUNNING, attempt_number=attempt_number, **repair)
    return run


# Compiled once: Django's get_or_create built the same locking read on every claim.
_DISPATCH_LOCK = CompiledQuery(lambda: DispatchLock.objects.select_for_update().filter(pk=1).values_list("pk"))

# The turn needs the skill and its version next: fetched with the run, but only the run row is locked.
_RUN_TO_CLAIM = PreparedQuery(
    lambda pk: Run.objects.select_for_update(of=("self",)).select_related("skill", "skill_version").filter(pk=pk)[:1],
    Run._meta.pk,
)


def record_engine_pid(request_id, attempt_number: int, worker_id: str, pid: int) -> None:
    _ENGINE_PID.set((request_id, attempt_number, worker_id), engine_pid=pid)


# Once per turn, written out: Django built this UPDATE in longer than it runs.
_ENGINE_PID = WrittenUpdate(Run, "attempt_number", "claimed_by")


def turn_claim(request_id, attempt_number: int, worker_id: str) -> QuerySet[Run]:
    """The run while its turn `attempt_number` is still `worker_id`'s (empty once not): running
    that attempt under this worker's claim. A cancel, a reaping or the turn's recorded end ends it."""
    return Run.objects.filter(
        pk=request_id, attempt_number=attempt_number, claimed_by=worker_id, status=RunStatus.RUNNING
    )


_LOCKED_TURN_CLAIM = PreparedQuery(
    lambda pk, attempt_number, worker_id: turn_claim(pk, attempt_number, worker_id).select_for_update()[:1],
    Run._meta.pk,
    Run._meta.get_field("attempt_number"),
    Run._meta.get_field("claimed_by"),
)


def locked_turn_claim(request_id, attempt_number: int, worker_id: str) -> Run | None:
    """turn_claim's run, locked (in a transaction), or None once the claim is gone."""
    run: Run | None = _LOCKED_TURN_CLAIM.one(request_id, attempt_number, worker_id)
    return run


def turn_still_ours(request_id, attempt_number: int, worker_id: str, *, beat: bool) -> bool:
    """Whether the claim on a running turn still holds (a cancel ends it); with `beat`, also
    renews the heartbeat."""
    if beat:
        return turn_claim(request_id, attempt_number, worker_id).update(heartbeat_at=timezone.now()) == 1
    return bool(_TURN_CLAIMED.rows(request_id, attempt_number, worker_id))


# Read four times a second while a turn runs (ClaimControl.should_abort): compiled once.
_TURN_CLAIMED = PreparedQuery(
    lambda pk, attempt_number, worker_id: turn_claim(pk, attempt_number, worker_id).values_list("pk")[:1],
    Run._meta.pk,
    Run._meta.get_field("attempt_number"),
    Run._meta.get_field("claimed_by"),
)


class StickyWait(enum.Enum):
    """Where a sticky run stands while the worker holding its process waits for the reply."""

    LOST = "lost"  # ended, or no longer this worker's
    WAITING = "waiting"
    RESUMED = "resumed"  # a reply (or auto-decision) started the next attempt


def sticky_wait_state(request_id, attempt_number: int, worker_id: str, *, beat: bool) -> StickyWait:
    """R-LC7: the wait after `attempt_number`, seen by the worker holding the resident process; with
    `beat`, also renews the heartbeat, so the held process is not reaped as orphaned."""
    run = one_or_none(Run.objects.filter(pk=request_id).only("status", "attempt_number", "claimed_by"))
    if run is None or run.claimed_by != worker_id or run.is_terminal:
        return StickyWait.LOST
    if run.status == RunStatus.RUNNING and run.attempt_number > attempt_number:
        return StickyWait.RESUMED
    if beat:
        Run.objects.filter(pk=request_id, claimed_by=worker_id).update(heartbeat_at=timezone.now())
    return StickyWait.WAITING


def complete_turn(
    request_id,
    attempt_number: int,
    worker_id: str,
    turn: TurnResult,
    decision: TurnDecision,
    duration_ms: int | None = None,
    unrecorded_pid: int | None = None,
) -> Run | None:
    """Apply a decided turn; a turn whose claim was lost meanwhile (canceled) changes nothing.
    `unrecorded_pid`: the engine's pid, if the database was away from its start until now."""
    with transaction.atomic():
        run = locked_turn_claim(request_id, attempt_number, worker_id)
        if run is None:
            return None
        record_turn_usage(run, attempt_number, turn.usage, duration_ms)
        if turn.session_handle:
            run.session_handle = turn.session_handle
        if run.interactive_profile != InteractiveProfile.STICKY_PROCESS:
            run.engine_pid = None
        elif unrecorded_pid is not None:
            # A sticky process lives on into the wait and the next turns: recovery needs its pid
            # to kill it when the worker holding it dies (R-LC13), from the moment the run waits;
            # terminal states clear it.
            run.engine_pid = unrecorded_pid
        said: list[tuple[str, dict[str, Any]]] = []  # saved with the run's change below
        if turn.assistant_text:
            said.append(("assistant_message", {"attempt": attempt_number, "text": turn.assistant_text}))
        for warning in decision.warnings:
            if warning not in run.warnings:
                run.warnings.append(warning)
                said.append(("warning", warning))
        if decision.status == RunStatus.WAITING_USER:
            assert decision.pending is not None  # a waiting decision always carries its question
            open_wait(run, decision.pending, attempt_number, preceding=said)
        elif decision.status == REPAIRING:
            _start_repair_round(run, decision, preceding=said)
        else:
            transition(run, RunStatus(decision.status), result=decision.result_envelope(), preceding=said)
    return run


def _start_repair_round(run: Run, decision: TurnDecision, preceding: Events) -> None:
    """R-RP1: the same engine session is asked to fix its answer, as a new attempt that is neither
    a user turn nor an interaction. A resumable run queues for a slot and a new process; a sticky
    one stays running and its resident process gets the prompt next."""
    run.repair_round += 1
    run.repair_rounds += 1
    run.attempt_number += 1
    run.next_prompt = decision.repair_prompt
    repair = {
        "round": run.repair_round,
        "max_rounds": run.options.max_repair_rounds,
        "attempt": run.attempt_number,
        "error": decision.error,
        "problems": decision.problems[:REPAIR_PROBLEMS_LISTED],
    }
    said = [*preceding, ("repair", repair)]
    if run.interactive_profile == InteractiveProfile.RESUMABLE:
        transition(
            run, RunStatus.QUEUED, preceding=said, attempt_number=run.attempt_number, repair_round=run.repair_round
        )
    else:
        events = number_events(run, said)
        run.save()
        insert_events(run, events)
