"""Every change to a run goes through here: one transaction per change, each appending its event.

Views, consumers and tasks call these functions; none of them sets a run's status itself.
"""

from __future__ import annotations

import json
import logging
import shutil
from datetime import timedelta
from typing import Any, BinaryIO

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from engines.prompt import reply_prompt
from engines.registry import get_adapter
from engines.types import TurnResult
from skillrunner.archives import ArchiveError, extract_zip
from skillrunner.errors import ApplicationError, Conflict, NotFound
from skills.selectors import current_version
from skills.services import archive_limits

from .cache import cache_key, cached_run
from .dispatch import enqueue_turn
from .events import append_event
from .inputs import file_fields, missing_required_files, required_file_fields, validate_request_payload
from .models import (
    TERMINAL_STATUSES,
    DispatchLock,
    Interaction,
    InteractiveProfile,
    RecoveryState,
    Run,
    RunStatus,
)
from .options import resolve_options
from .outcome import TurnDecision

logger = logging.getLogger(__name__)

TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELED}),
    RunStatus.RUNNING: frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.WAITING_USER, RunStatus.CANCELED}),
    RunStatus.WAITING_USER: frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELED}),
}

AUTO_DECISION_INSTRUCTION = (
    "No reply arrived in time. Continue on your own judgement, following the decision policy "
    "'{policy}', and finish the task."
)


def _locked(request_id) -> Run:
    return Run.objects.select_for_update().get(pk=request_id)


def _transition(run: Run, to: RunStatus, *, error: dict[str, str] | None = None, **event_extra: Any) -> None:
    """Move `run` (locked, inside a transaction) to `to`, save it and append the status event."""
    if to not in TRANSITIONS.get(run.status, frozenset()):
        raise Conflict("INVALID_TRANSITION", f"a {run.status} run cannot become {to}")
    previous = run.status
    released_slot = False
    run.status = to
    if error is not None:
        run.error = error
    if to in TERMINAL_STATUSES:
        released_slot = run.holds_slot
        run.finished_at = timezone.now()
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
    run.save()
    append_event(
        run,
        "status",
        {"from": previous, "to": to, "error": run.error if to in TERMINAL_STATUSES else None, **event_extra},
    )
    if released_slot or to == RunStatus.QUEUED:
        transaction.on_commit(dispatch_queued_runs)


# --- creating runs -----------------------------------------------------------------------------


def create_run(
    *,
    owner,
    skill_id: str,
    engine: str,
    model: str | None,
    input: Any,
    parameter: Any,
    runtime_options: Any,
    expects_upload: bool = False,
) -> Run:
    """Admission (R-AD1–R-AD5) in upstream's order; nothing is created unless every check passes.

    A run waits for an upload when the skill has required file inputs, or when the caller says
    it will send optional ones (`expects_upload`, used by the browser form).
    """
    version = current_version(skill_id)
    if version is None:
        raise NotFound("SKILL_NOT_FOUND", f"no installed skill {skill_id!r}")
    if engine not in version.effective_engines:
        raise ApplicationError(
            "SKILL_ENGINE_UNSUPPORTED",
            f"skill {skill_id} does not run on engine {engine!r}; it supports {', '.join(version.effective_engines)}",
            declared_engines=version.engines,
            unsupported_engines=version.unsupported_engines,
            effective_engines=version.effective_engines,
            requested_engine=engine,
        )
    options, option_warnings = resolve_options(runtime_options, version.runtime_defaults)
    if options.execution_mode not in version.execution_modes:
        raise ApplicationError(
            "SKILL_EXECUTION_MODE_UNSUPPORTED",
            f"skill {skill_id} does not support execution_mode {options.execution_mode!r}",
            declared_execution_modes=version.execution_modes,
            requested_execution_mode=options.execution_mode,
        )
    validate_request_payload(version.schemas, input, parameter)
    if Run.objects.filter(status=RunStatus.QUEUED).count() >= settings.SKILLRUNNER_MAX_QUEUED_RUNS:
        raise ApplicationError("QUEUE_FULL", "the run queue is full; try again later", status_code=429)

    input_schema = version.schemas["input"]
    awaiting_upload = bool(required_file_fields(input_schema)) or (expects_upload and bool(file_fields(input_schema)))
    cacheable = options.execution_mode == "auto" and not options.no_cache and not awaiting_upload
    key = cache_key(version, engine, model, input, parameter) if cacheable else ""
    source = cached_run(owner, key) if key else None
    with transaction.atomic():
        run = Run.objects.create(
            owner=owner,
            skill_id=version.skill_id,
            skill_version=version,
            engine=engine,
            model=model or "",
            execution_mode=options.execution_mode,
            interactive_profile=get_adapter(engine).interactive_profile,
            input=input,
            parameter=parameter,
            runtime_options=options.as_dict(),
            warnings=option_warnings,
            awaiting_upload=awaiting_upload,
            cache_key=key,
        )
        if source is not None:
            _complete_from_cache(run, source)
        else:
            append_event(run, "status", {"from": None, "to": RunStatus.QUEUED, "error": None})
            if not awaiting_upload:
                transaction.on_commit(dispatch_queued_runs)
        for warning in option_warnings:
            append_event(run, "warning", warning)
    (run.run_dir / "uploads").mkdir(parents=True, exist_ok=True)
    return run


def _complete_from_cache(run: Run, source: Run) -> None:
    """A new run born succeeded, with the earlier run's result and a copy of its artifacts."""
    artifacts = source.run_dir / "artifacts"
    if artifacts.is_dir():
        shutil.copytree(artifacts, run.run_dir / "artifacts", symlinks=False)
    now = timezone.now()
    run.status = RunStatus.SUCCEEDED
    run.cache_hit = True
    run.result = source.result
    run.session_handle = ""
    run.started_at = run.finished_at = now
    run.save()
    append_event(run, "result", run.result)
    append_event(
        run,
        "status",
        {"from": None, "to": RunStatus.SUCCEEDED, "error": None, "cache_hit": True, "cached_from": str(source.pk)},
    )


def attach_upload(run: Run, source: BinaryIO) -> list[str]:
    """Input files for a run that waits for them (R-AD5); the run is dispatched once all are there."""
    if not run.awaiting_upload or run.status != RunStatus.QUEUED:
        raise Conflict("UPLOAD_NOT_EXPECTED", "this run does not wait for an upload")
    uploads = run.run_dir / "uploads"
    staging = run.run_dir / ".uploads-staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        extracted = extract_zip(source, staging, archive_limits())
    except ArchiveError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ApplicationError(exc.code, exc.message) from exc
    missing = missing_required_files(run.skill_version.schemas["input"], run.input, staging)
    if missing:
        shutil.rmtree(staging, ignore_errors=True)
        raise ApplicationError(
            "INPUT_FILE_MISSING", f"the upload lacks required input files: {', '.join(missing)}", missing=missing
        )
    shutil.rmtree(uploads, ignore_errors=True)
    staging.rename(uploads)
    with transaction.atomic():
        locked = _locked(run.pk)
        if not locked.awaiting_upload or locked.status != RunStatus.QUEUED:
            raise Conflict("UPLOAD_NOT_EXPECTED", "this run does not wait for an upload")
        locked.awaiting_upload = False
        locked.save(update_fields=["awaiting_upload", "updated_at"])
        append_event(locked, "input_uploaded", {"files": sorted(extracted)})
        transaction.on_commit(dispatch_queued_runs)
    return extracted


# --- dispatching and claiming turns ------------------------------------------------------------


def dispatch_queued_runs() -> int:
    """Enqueue a turn for as many queued runs as there are free slots; duplicates are harmless
    because a turn only starts after `claim_turn` wins."""
    free = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS - Run.objects.filter(holds_slot=True).count()
    if free <= 0:
        return 0
    ready = list(
        Run.objects.filter(status=RunStatus.QUEUED, awaiting_upload=False)
        .order_by("created_at")
        .values_list("request_id", "attempt_number")[:free]
    )
    for index, (request_id, attempt_number) in enumerate(ready):
        try:
            enqueue_turn(request_id, attempt_number)
        except Exception:  # broker away: the run stays queued and the supervisor dispatches it later
            logger.warning("could not enqueue run %s; the supervisor will retry", request_id, exc_info=True)
            return index
    return len(ready)


def claim_turn(request_id, attempt_number: int, worker_id: str) -> Run | None:
    """Atomically take a queued run and a slot for one attempt (R-LC8, R-LC14); None if not ours."""
    with transaction.atomic():
        DispatchLock.objects.select_for_update().get_or_create(pk=1)  # the row is migrated; tests may flush it
        # The turn needs the skill and its version next: fetched here, but only the run row is locked.
        run = (
            Run.objects.select_for_update(of=("self",))
            .select_related("skill", "skill_version")
            .filter(pk=request_id)
            .first()
        )
        if run is None or run.status != RunStatus.QUEUED or run.attempt_number != attempt_number or run.awaiting_upload:
            return None
        if (
            not run.holds_slot
            and Run.objects.filter(holds_slot=True).count() >= settings.SKILLRUNNER_MAX_CONCURRENT_TURNS
        ):
            return None
        now = timezone.now()
        run.holds_slot = True
        run.claimed_by = worker_id
        run.heartbeat_at = now
        run.started_at = run.started_at or now
        _transition(run, RunStatus.RUNNING, attempt_number=attempt_number)
    return run


def record_engine_pid(request_id, attempt_number: int, worker_id: str, pid: int) -> None:
    Run.objects.filter(pk=request_id, attempt_number=attempt_number, claimed_by=worker_id).update(engine_pid=pid)


def turn_still_ours(request_id, attempt_number: int, worker_id: str, *, beat: bool) -> bool:
    """Whether the claim still holds (a cancel ends it); with `beat`, also renews the heartbeat."""
    claim = Run.objects.filter(
        pk=request_id, attempt_number=attempt_number, claimed_by=worker_id, status=RunStatus.RUNNING
    )
    if beat:
        return claim.update(heartbeat_at=timezone.now()) == 1
    return claim.exists()


# --- finishing turns ---------------------------------------------------------------------------


def _wait_deadline(run: Run):
    """Only a deadline that does something is stored (R-LC9): strict resumable runs wait forever."""
    strict = run.runtime_options.get("interactive_require_user_reply", True)
    if run.interactive_profile == InteractiveProfile.RESUMABLE and strict:
        return None
    return timezone.now() + timedelta(
        seconds=run.runtime_options.get("session_timeout_sec", settings.SKILLRUNNER_DEFAULT_SESSION_TIMEOUT)
    )


def complete_turn(
    request_id, attempt_number: int, worker_id: str, turn: TurnResult, decision: TurnDecision
) -> Run | None:
    """Apply a decided turn; a turn whose claim was lost meanwhile (canceled) changes nothing."""
    with transaction.atomic():
        run = _locked(request_id)
        if run.status != RunStatus.RUNNING or run.attempt_number != attempt_number or run.claimed_by != worker_id:
            return None
        if turn.session_handle:
            run.session_handle = turn.session_handle
        if run.interactive_profile != InteractiveProfile.STICKY_PROCESS:
            # A sticky process lives on into the wait and the next turns: recovery needs its pid
            # to kill it when the worker holding it dies (R-LC13); terminal states clear it.
            run.engine_pid = None
        if turn.assistant_text:
            append_event(run, "assistant_message", {"attempt": attempt_number, "text": turn.assistant_text})
        for warning in decision.warnings:
            if warning not in run.warnings:
                run.warnings.append(warning)
                append_event(run, "warning", warning)
        if decision.status == RunStatus.WAITING_USER:
            pending = decision.pending
            Interaction.objects.create(
                run=run,
                interaction_id=pending["interaction_id"],
                attempt_number=attempt_number,
                kind=pending.get("kind") or "open_text",
                prompt=pending["prompt"],
                payload=pending,
            )
            run.pending_interaction_id = pending["interaction_id"]
            run.interaction_count += 1
            run.wait_deadline_at = _wait_deadline(run)
            append_event(run, "interaction_pending", pending)
            _transition(run, RunStatus.WAITING_USER, pending_interaction_id=run.pending_interaction_id)
        else:
            _finish(run, RunStatus(decision.status), decision.result_envelope())
    return run


def _finish(run: Run, to: RunStatus, result: dict[str, Any]) -> None:
    """A terminal state carries its result envelope (R-OU2), announced just before the status."""
    run.result = result
    append_event(run, "result", result)
    _transition(run, to, error=result["error"])


def _end_without_output(run: Run, to: RunStatus, code: str, message: str) -> None:
    _finish(
        run,
        to,
        {
            "status": "canceled" if to == RunStatus.CANCELED else "failed",
            "data": None,
            "artifacts": [],
            "repair_level": "none",
            "validation_warnings": run.warnings,
            "error": {"code": code, "message": message},
        },
    )


def fail_run(request_id, code: str, message: str, *, recovery_state: str | None = None) -> Run | None:
    """End an active run as failed with a stable code (worker crash, timeouts, recovery)."""
    with transaction.atomic():
        run = _locked(request_id)
        if run.is_terminal:
            return None
        if recovery_state:
            run.recovery_state = recovery_state
        _end_without_output(run, RunStatus.FAILED, code, message)
    return run


# --- interactions ------------------------------------------------------------------------------


def _same_response(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _resolve_pending(run: Run, response: Any, *, mode: str, user, idempotency_key: str) -> Interaction:
    interaction = run.interactions.get(interaction_id=run.pending_interaction_id)
    interaction.response = response
    interaction.resolution_mode = mode
    interaction.idempotency_key = idempotency_key
    interaction.answered_by = user
    interaction.answered_at = timezone.now()
    interaction.save()
    run.next_prompt = reply_prompt(response)
    run.attempt_number += 1
    run.pending_interaction_id = None
    run.wait_deadline_at = None
    append_event(
        run,
        "interaction_reply",
        {
            "interaction_id": interaction.interaction_id,
            "response": response,
            "resolution_mode": mode,
            "answered_at": interaction.answered_at.isoformat(),
        },
    )
    # A resumable run queues for a new process; a sticky one goes straight back to its live process.
    _transition(run, RunStatus.QUEUED if run.interactive_profile == InteractiveProfile.RESUMABLE else RunStatus.RUNNING)
    return interaction


def submit_reply(run: Run, *, user, interaction_id: Any, response: Any, idempotency_key: str = "") -> Run:
    """R-LC5: exactly one of concurrent replies, auto-decisions and cancels wins the row lock."""
    with transaction.atomic():
        run = _locked(run.pk)
        if run.execution_mode != "interactive":
            raise ApplicationError("RUN_NOT_INTERACTIVE", "this run is not interactive")
        if idempotency_key:
            previous = run.interactions.filter(idempotency_key=idempotency_key).first()
            if previous is not None:
                if _same_response(previous.response, response) and previous.interaction_id == interaction_id:
                    return run
                raise Conflict("IDEMPOTENCY_KEY_REUSED", "this idempotency_key was already used with a different reply")
        if run.status != RunStatus.WAITING_USER:
            raise Conflict("RUN_NOT_WAITING", f"the run is {run.status}, not waiting for a reply", status=run.status)
        if interaction_id != run.pending_interaction_id:
            raise Conflict(
                "INTERACTION_STALE",
                f"interaction {interaction_id} is not the pending one ({run.pending_interaction_id})",
                pending_interaction_id=run.pending_interaction_id,
            )
        _resolve_pending(
            run, response, mode=Interaction.ResolutionMode.USER_REPLY, user=user, idempotency_key=idempotency_key
        )
    return run


def expire_wait(request_id) -> Run | None:
    """The wait deadline passed (R-LC9, R-LC10): auto-decide, or fail a strict sticky run."""
    with transaction.atomic():
        run = _locked(request_id)
        if (
            run.status != RunStatus.WAITING_USER
            or run.wait_deadline_at is None
            or run.wait_deadline_at > timezone.now()
        ):
            return None
        strict = run.runtime_options.get("interactive_require_user_reply", True)
        if strict:
            _end_without_output(
                run, RunStatus.FAILED, "INTERACTION_WAIT_TIMEOUT", "no reply arrived before session_timeout_sec"
            )
            return run
        pending = run.interactions.get(interaction_id=run.pending_interaction_id)
        policy = pending.payload.get("default_decision_policy") or "engine_judgement"
        run.auto_decision_count += 1
        _resolve_pending(
            run,
            AUTO_DECISION_INSTRUCTION.format(policy=policy),
            mode=Interaction.ResolutionMode.AUTO_DECIDE_TIMEOUT,
            user=None,
            idempotency_key=f"auto-timeout:{pending.interaction_id}",
        )
    return run


def cancel_run(run: Run) -> tuple[Run, bool]:
    """R-LC11: cancel any active run; the worker owning its process sees the claim end and kills it."""
    with transaction.atomic():
        run = _locked(run.pk)
        if run.is_terminal:
            return run, False
        _end_without_output(run, RunStatus.CANCELED, "CANCELED_BY_USER", "the run was canceled")
    return run, True


def recover_waiting_run(request_id) -> Run | None:
    """Keep a resumable waiting run after a restart (R-LC13); it stays answerable."""
    with transaction.atomic():
        run = _locked(request_id)
        if run.status != RunStatus.WAITING_USER or run.recovery_state == RecoveryState.RECOVERED_WAITING:
            return None
        run.recovery_state = RecoveryState.RECOVERED_WAITING
        run.save(update_fields=["recovery_state", "updated_at"])
        append_event(run, "recovered", {"recovery_state": run.recovery_state})
    return run
