"""The run state machine: the transition table, the one place a run's status changes, and the
events every change announces (the status event, and a terminal run's result envelope)."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from kernel.errors import Conflict
from processes import wakeups
from skills.models import SkillVersion
from skills.services import remove_snapshot

from .. import hooks, sweeps
from ..events import Events, append_event, insert_events, number_events
from ..models import TERMINAL_STATUSES, InteractiveProfile, Run, RunStatus
from ..outcome import result_envelope
from .dispatching import dispatch_queued_runs, owner_queue_changed, run_joined_queue, run_took_slot

# Allowed moves; the `None` row is a new run: queued, or born succeeded from the result cache.
TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({RunStatus.QUEUED, RunStatus.SUCCEEDED}),
    # queued → succeeded: a run whose uploaded files make it identical to an earlier one (R-OP9).
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.SUCCEEDED}),
    # running → queued: a resumable run's repair round waits for a slot like any turn (R-RP1).
    RunStatus.RUNNING: frozenset(
        {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.WAITING_USER, RunStatus.CANCELED, RunStatus.QUEUED}
    ),
    RunStatus.WAITING_USER: frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELED}),
}


def locked(request_id) -> Run:
    return Run.objects.select_for_update().get(pk=request_id)


def status_event(previous: str | None, to: str, error: dict[str, str] | None, **extra: Any) -> dict[str, Any]:
    """The payload of a `status` event (R-UI1)."""
    return {"from": previous, "to": to, "error": error, **extra}


def sticky_wait_name(request_id) -> str:
    """What the worker holding a sticky run's resident process listens under while the run waits
    (processes.wakeups): every change to the waiting run wakes it (transition)."""
    return f"sticky-{uuid.UUID(str(request_id)).hex}"


def transition(
    run: Run,
    to: RunStatus,
    *,
    result: dict[str, Any] | None = None,
    new: bool = False,
    preceding: Events = (),
    **event_extra: Any,
) -> None:
    """Move `run` (locked, inside a transaction) to `to`, save it and append its events.

    A terminal state carries its `result` envelope (R-OU2), announced just before the status.
    `new` is a run not saved yet: it is inserted in its first status. `preceding` are events of
    the same change (kind, payload) announced before all that: saved with it, in one statement.
    """
    previous = None if new else run.status
    if to not in TRANSITIONS.get(previous, frozenset()):
        raise Conflict("INVALID_TRANSITION", f"a {previous} run cannot become {to}")
    released_slot = False
    run.status = to
    if to == RunStatus.QUEUED:
        run.offered_at = None  # a turn newly queued is offered at once (services.dispatching)
    if result is not None:
        run.result = result
        run.error = result["error"]
    if to in TERMINAL_STATUSES:
        released_slot = run.holds_slot
        run.finished_at = timezone.now()
        if new:
            run.started_at = run.finished_at
        run.holds_slot = False
        run.claimed_by = ""
        run.engine_pid = None
        run.pending_interaction_id = None
        run.wait_deadline_at = None
    elif to in (RunStatus.WAITING_USER, RunStatus.QUEUED) and run.interactive_profile == InteractiveProfile.RESUMABLE:
        # A resumable run holds no process while it waits, so it gives its slot back (R-LC8).
        released_slot = run.holds_slot
        run.holds_slot = False
        run.claimed_by = ""
        run.engine_pid = None
    status = status_event(previous, to, run.error if to in TERMINAL_STATUSES else None, **event_extra)
    announced = [("result", result)] if result is not None else []
    events = number_events(run, [*preceding, *announced, ("status", status)])
    run.save()
    if RunStatus.QUEUED in (previous, to) and not run.awaiting_upload:
        # The run joins or leaves the ready queue; leaving it to run, it took a slot (claims).
        if new:
            run_joined_queue(run)
        elif to == RunStatus.RUNNING:
            run_took_slot(run)
        else:
            owner_queue_changed(run.owner_id)
    insert_events(run, events)
    hooks.status_changed.send(sender=Run, run=run)  # written with the change: webhook deliveries (R-NT1)
    if to in TERMINAL_STATUSES:
        transaction.on_commit(partial(sweeps.remove_run_leftovers, run.run_dir))
    if to in TERMINAL_STATUSES and run.admission_request and run.skill_version_id is not None:
        _remove_temporary_skill_files(run.skill_version_id)  # only a run created without its skill has that request
    if previous == RunStatus.WAITING_USER and run.interactive_profile == InteractiveProfile.STICKY_PROCESS:
        transaction.on_commit(partial(wakeups.wake, sticky_wait_name(run.pk)))  # answered, decided or ended
    if released_slot or (to == RunStatus.QUEUED and not run.awaiting_upload):
        transaction.on_commit(dispatch_queued_runs)


def end_without_output(run: Run, to: RunStatus, code: str, message: str) -> None:
    """End `run` (locked) as failed or canceled with a stable code and an output-less envelope."""
    transition(run, to, result=result_envelope(to, warnings=run.warnings, error={"code": code, "message": message}))


def fail_run(request_id, code: str, message: str, *, recovery_state: str | None = None) -> Run | None:
    """End an active run as failed with a stable code (worker crash, timeouts, recovery)."""
    with transaction.atomic():
        run = locked(request_id)
        if run.is_terminal:
            return None
        if recovery_state:
            run.recovery_state = recovery_state
        end_without_output(run, RunStatus.FAILED, code, message)
    return run


def record_warning(request_id, warning: dict[str, str]) -> None:
    """Add a warning to an active run once (a dependency build that failed before a turn, R-SK7)."""
    with transaction.atomic():
        run = locked(request_id)
        if run.is_terminal or warning in run.warnings:
            return
        run.warnings.append(warning)
        run.save(update_fields=["warnings", "updated_at"])
        append_event(run, "warning", warning)


def cancel_run(run: Run) -> tuple[Run, bool]:
    """R-LC11: cancel any active run; the worker owning its process sees the claim end and kills it."""
    with transaction.atomic():
        run = locked(run.pk)
        if run.is_terminal:
            return run, False
        end_without_output(run, RunStatus.CANCELED, "CANCELED_BY_USER", "the run was canceled")
    return run, True


def _remove_temporary_skill_files(version_id: int) -> None:
    """A skill uploaded for this run alone (R-UP4) is removed with it once it ends; its record
    stays for the audit."""
    version = SkillVersion.objects.filter(id=version_id, skill__temporary=True).first()
    if version is not None:
        transaction.on_commit(lambda: remove_snapshot(version))
