"""Waiting for the user (R-LC3–R-LC10): opening a wait, replies, timed-out waits, recovered waits."""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from engines.prompt import reply_prompt
from engines.replies import question_fields
from kernel.errors import ApplicationError, Conflict

from .. import runfiles
from ..events import Events, append_event
from ..models import Interaction, InteractiveProfile, RecoveryState, Run, RunStatus
from .lifecycle import end_without_output, locked, transition

logger = logging.getLogger(__name__)

AUTO_DECISION_INSTRUCTION = (
    "No reply arrived in time. Continue on your own judgement, following the decision policy "
    "'{policy}', and finish the task."
)
REPLY_FILES_DIR = "reply-files"


def reply_file_limits() -> dict[str, int]:
    """What a reply's files may come to (R-UP6): the handshake announces them (R-UP3), the file
    reply enforces them, the pages check them before sending."""
    return {
        "max_files": settings.SKILLRUNNER_REPLY_MAX_FILES,
        "max_file_bytes": settings.SKILLRUNNER_REPLY_MAX_FILE_BYTES,
        "max_total_bytes": settings.SKILLRUNNER_REPLY_MAX_TOTAL_BYTES,
    }


def reply_files_folder(interaction_id: int) -> str:
    """Where the files sent with a reply (R-UP6) land, relative to the run directory."""
    return f"{REPLY_FILES_DIR}/{interaction_id}"


class OnWaitTimeout(enum.Enum):
    """What ends a wait that outlived session_timeout_sec."""

    AUTO_DECIDE = "auto_decide"  # the agent goes on with its own judgement
    FAIL = "fail"  # INTERACTION_WAIT_TIMEOUT


def on_wait_timeout(profile: str, strict: bool) -> OnWaitTimeout | None:
    """The R-LC9 table. None: the run waits for its reply forever (a strict resumable run holds
    no process, so nothing is lost by waiting)."""
    if not strict:
        return OnWaitTimeout.AUTO_DECIDE
    return None if profile == InteractiveProfile.RESUMABLE else OnWaitTimeout.FAIL


def _wait_deadline(run: Run) -> datetime | None:
    """Only a deadline that does something is stored."""
    if on_wait_timeout(run.interactive_profile, run.options.interactive_require_user_reply) is None:
        return None
    return timezone.now() + timedelta(seconds=run.options.session_timeout_sec)


def open_wait(run: Run, pending: dict[str, Any], attempt_number: int, preceding: Events = ()) -> None:
    """`run` (locked, running) asks the user `pending` and waits (R-LC3, R-LC4); `preceding` are
    events of the turn announced before the question."""
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
    run.repair_round = 0  # whatever follows answers the user, not a repair prompt
    transition(
        run,
        RunStatus.WAITING_USER,
        preceding=[*preceding, ("interaction_pending", pending)],
        pending_interaction_id=run.pending_interaction_id,
    )


def _same_response(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _pending(run: Run) -> Interaction:
    """The interaction `run` (waiting) waits on."""
    assert run.pending_interaction_id is not None  # a waiting run always has one
    return run.interactions.get(interaction_id=run.pending_interaction_id)


def _resolve_pending(
    run: Run, interaction: Interaction, response: Any, *, prompt: str, mode: str, user, idempotency_key: str
) -> Interaction:
    interaction.response = response
    interaction.resolution_mode = mode
    interaction.idempotency_key = idempotency_key
    interaction.answered_by = user
    interaction.answered_at = timezone.now()
    interaction.save()
    run.next_prompt = prompt
    run.attempt_number += 1
    run.pending_interaction_id = None
    run.wait_deadline_at = None
    reply = {
        "interaction_id": interaction.interaction_id,
        "response": response,
        "text": interaction.answer_text,  # what the pages show of it
        "resolution_mode": mode,
        "answered_at": interaction.answered_at.isoformat(),
    }
    # A resumable run queues for a new process; a sticky one goes straight back to its resident process.
    resumable = run.interactive_profile == InteractiveProfile.RESUMABLE
    transition(run, RunStatus.QUEUED if resumable else RunStatus.RUNNING, preceding=[("interaction_reply", reply)])
    return interaction


@dataclass(frozen=True)
class ReplyFile:
    """One file sent with a reply, saved under `name` (a safe file name) in its staging folder."""

    name: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class StagedReplyFiles:
    """Files sent with a reply (R-UP6), held in `folder`, a directory of the service's own, until
    the reply is accepted and the folder moves into the run directory whole."""

    folder: Path
    files: tuple[ReplyFile, ...]

    def record(self, text: str, interaction_id: int) -> dict[str, Any]:
        """The reply as its interaction records it (R-LC6): the text and each file, by the path the
        agent reads it at and by content (so a retried request is recognised, R-LC5)."""
        folder = reply_files_folder(interaction_id)
        return {
            "text": text,
            "files": [
                {"name": f.name, "path": f"{folder}/{f.name}", "size_bytes": f.size_bytes, "sha256": f.sha256}
                for f in self.files
            ],
        }


def submit_reply(
    run: Run,
    *,
    user,
    interaction_id: Any,
    response: Any,
    idempotency_key: str = "",
    files: StagedReplyFiles | None = None,
) -> Run:
    """R-LC5: exactly one of concurrent replies, auto-decisions and cancels wins the row lock.

    With `files` (R-UP6) the response is the reply's text: the interaction records the text with
    the files, the files move into the run directory once the reply wins, and the agent reads
    their paths after the text.
    """
    recorded = response if files is None else files.record(response, interaction_id)
    attached = [f["path"] for f in recorded["files"]] if files is not None else []
    placed: StagedReplyFiles | None = None
    try:
        with transaction.atomic():
            run = locked(run.pk)
            if _is_retry(run, interaction_id, recorded, idempotency_key):
                return run
            pending = _pending(run)
            if files is not None:
                _place_files(run, files, interaction_id)
                placed = files
            _resolve_pending(
                run,
                pending,
                recorded,
                prompt=reply_prompt(response, attached, question_fields(pending.payload)),
                mode=Interaction.ResolutionMode.USER_REPLY,
                user=user,
                idempotency_key=idempotency_key,
            )
    except BaseException:
        folder = reply_files_folder(interaction_id)
        # The reply was not recorded: neither are its files.
        if placed is not None and not runfiles.move_directory_out(run.run_dir, folder, placed.folder):
            logger.warning("run %s: the files of an unrecorded reply stay at %s", run.pk, folder)
        raise
    return run


def _is_retry(run: Run, interaction_id: Any, response: Any, idempotency_key: str) -> bool:
    """Whether `run` (locked) already took this very reply; raises when it cannot take it now."""
    if run.execution_mode != "interactive":
        raise ApplicationError("RUN_NOT_INTERACTIVE", "this run is not interactive")
    if idempotency_key:
        previous = run.interactions.filter(idempotency_key=idempotency_key).first()
        if previous is not None:
            if _same_response(previous.response, response) and previous.interaction_id == interaction_id:
                return True
            raise Conflict("IDEMPOTENCY_KEY_REUSED", "this idempotency_key was already used with a different reply")
    if run.status != RunStatus.WAITING_USER:
        raise Conflict("RUN_NOT_WAITING", f"the run is {run.status}, not waiting for a reply", status=run.status)
    if interaction_id != run.pending_interaction_id:
        raise Conflict(
            "INTERACTION_STALE",
            f"interaction {interaction_id} is not the pending one ({run.pending_interaction_id})",
            pending_interaction_id=run.pending_interaction_id,
        )
    return False


def _place_files(run: Run, files: StagedReplyFiles, interaction_id: int) -> None:
    folder = reply_files_folder(interaction_id)
    if not runfiles.move_directory_in(run.run_dir, files.folder, folder):
        raise Conflict(
            "REPLY_FILES_PATH_TAKEN",
            f"the run directory already holds something at {folder} (or {REPLY_FILES_DIR} is not a plain folder)",
            path=folder,
        )


def expire_wait(request_id) -> Run | None:
    """The wait deadline passed (R-LC9, R-LC10): auto-decide, or fail a strict sticky run."""
    with transaction.atomic():
        run = locked(request_id)
        if (
            run.status != RunStatus.WAITING_USER
            or run.wait_deadline_at is None
            or run.wait_deadline_at > timezone.now()
        ):
            return None
        on_timeout = on_wait_timeout(run.interactive_profile, run.options.interactive_require_user_reply)
        if on_timeout is OnWaitTimeout.FAIL:
            end_without_output(
                run, RunStatus.FAILED, "INTERACTION_WAIT_TIMEOUT", "no reply arrived before session_timeout_sec"
            )
            return run
        if on_timeout is None:  # a deadline stored under an older rule: the run keeps waiting
            return None
        pending = _pending(run)
        policy = pending.payload.get("default_decision_policy") or "engine_judgement"
        run.auto_decision_count += 1
        instruction = AUTO_DECISION_INSTRUCTION.format(policy=policy)
        _resolve_pending(
            run,
            pending,
            instruction,
            prompt=reply_prompt(instruction),
            mode=Interaction.ResolutionMode.AUTO_DECIDE_TIMEOUT,
            user=None,
            idempotency_key=f"auto-timeout:{pending.interaction_id}",
        )
    return run


def recover_waiting_run(request_id) -> Run | None:
    """Keep a resumable waiting run after a restart (R-LC13); it stays answerable."""
    with transaction.atomic():
        run = locked(request_id)
        if run.status != RunStatus.WAITING_USER or run.recovery_state == RecoveryState.RECOVERED_WAITING:
            return None
        run.recovery_state = RecoveryState.RECOVERED_WAITING
        run.save(update_fields=["recovery_state", "updated_at"])
        append_event(run, "recovered", {"recovery_state": run.recovery_state})
    return run
