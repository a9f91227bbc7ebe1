"""Reads of runs, always through the caller's visibility (owners see theirs, staff see all)."""

from __future__ import annotations

import codecs
import os
import re
import uuid
from pathlib import Path
from typing import Any, BinaryIO

from django.conf import settings
from django.db.models import F, QuerySet

from skillrunner.errors import ApplicationError, NotFound

from . import runfiles
from .models import Interaction, Run, RunEvent, TurnUsage

EVENT_PAGE_LIMIT = 500


def runs_visible_to(user) -> QuerySet[Run]:
    """A list that shows usage adds prefetch_related("turn_usage"); one run reads it when asked
    (prefetching it for one run cost more than the query itself)."""
    runs = Run.objects.select_related("skill", "skill_version", "owner")
    return runs if user.is_staff else runs.filter(owner=user)


def usage_visible_to(user) -> QuerySet[TurnUsage]:
    """Turn usage of the user's own runs; staff see everyone's (R-AC4)."""
    turns = TurnUsage.objects.all()
    return turns if user.is_staff else turns.filter(run__owner=user)


def run_for(user, request_id: Any) -> Run:
    """The run, or a 404 that does not reveal whether someone else's run exists."""
    try:
        return runs_visible_to(user).get(pk=uuid.UUID(str(request_id)))
    except (ValueError, Run.DoesNotExist):  # not a UUID, or no run of theirs
        raise NotFound("RUN_NOT_FOUND", f"no run {request_id}") from None


def events_after(run: Run, after_seq: int, limit: int = EVENT_PAGE_LIMIT) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run=run, seq__gt=after_seq).order_by("seq")[:limit])


def interaction_history(run: Run) -> QuerySet[Interaction]:
    return run.interactions.select_related("answered_by").order_by("interaction_id")


def pending_payload(run: Run) -> dict[str, Any] | None:
    if run.status != "waiting_user" or run.pending_interaction_id is None:
        return None
    interaction = run.interactions.filter(interaction_id=run.pending_interaction_id).first()
    return interaction.payload if interaction else None


def artifact_file(run: Run, relative: str) -> BinaryIO:
    """A file under the run's artifacts/, given as `artifacts/x` or `x`, open for reading.

    Opened through runs.runfiles: never a link (at any level), a special file or anything outside.
    """
    relative = relative.removeprefix("artifacts/")
    handle = runfiles.open_file(run.run_dir, f"artifacts/{relative}")
    if handle is None:
        raise NotFound("ARTIFACT_NOT_FOUND", f"no artifact {relative!r}")
    return handle


def with_files(run: Run) -> Run:
    """The run, if retention has not removed its folders yet (else 410 RUN_FILES_REMOVED)."""
    if run.files_removed_at is not None:
        raise ApplicationError(
            "RUN_FILES_REMOVED",
            f"the files of run {run.pk} were removed on {run.files_removed_at:%Y-%m-%d} "
            f"(kept {settings.SKILLRUNNER_RUN_RETENTION_DAYS} days after the run finished)",
            status_code=410,
        )
    return run


LOG_STREAMS = ("prompt", "stdout", "stderr")
_LOG_NAME = re.compile(r"attempt-([1-9][0-9]{0,8})\.(prompt|stdout|stderr)\.txt")


def log_sizes(run: Run) -> dict[int, dict[str, int]]:
    """Each attempt that left logs -> the byte size of each stream (0 when absent), by one listing
    of the run's log folder: no log is opened or read."""
    sizes: dict[int, dict[str, int]] = {}
    try:
        entries = list(os.scandir(run.records_dir / "logs"))
    except FileNotFoundError:
        return sizes
    for entry in entries:
        match = _LOG_NAME.fullmatch(entry.name)
        if match and entry.is_file(follow_symlinks=False):
            attempt = sizes.setdefault(int(match[1]), dict.fromkeys(LOG_STREAMS, 0))
            attempt[match[2]] = entry.stat(follow_symlinks=False).st_size
    return dict(sorted(sizes.items()))


def log_path(run: Run, attempt_number: int, stream: str) -> Path:
    return run.records_dir / "logs" / f"attempt-{attempt_number}.{stream}.txt"


def log_head(path: Path, max_bytes: int) -> str:
    """At most `max_bytes` of a UTF-8 log from its start, never cutting a character in two."""
    try:
        with open(path, "rb") as log:
            head = log.read(max_bytes)
            whole = log.read(1) == b""
    except FileNotFoundError:
        return ""
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(head, final=whole)


def waiting_questions(user) -> QuerySet[Interaction]:
    """The open question of every run waiting for `user` (their own runs), oldest first (R-NT4)."""
    return (
        Interaction.objects.filter(
            run__owner=user,
            run__status="waiting_user",
            run__pending_interaction_id=F("interaction_id"),
            answered_at__isnull=True,
        )
        .select_related("run__skill_version")
        .order_by("asked_at", "pk")
    )
