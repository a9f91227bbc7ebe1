"""Reads of runs, always through the caller's visibility (owners see theirs, staff see all)."""

from __future__ import annotations

import codecs
import os
import re
import uuid
from collections.abc import Iterable
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import F, Q, QuerySet, Subquery
from django.db.models.sql import Query
from django.utils import timezone

from accounts.authentication import LAST_USED_RESOLUTION_SECONDS
from accounts.models import ApiToken, is_key_hash, split_key
from kernel.compiled import converting
from kernel.errors import ApplicationError, NotFound
from skills.models import Skill, SkillVersion

from . import runfiles
from .models import EventKind, Interaction, Run, RunEvent, RunStatus, TurnUsage
from .usage import USAGE_KEYS

EVENT_PAGE_LIMIT = 500


def runs_visible_to(user) -> QuerySet[Run]:
    """A list that shows usage adds prefetch_related("turn_usage"); one run reads it when asked
    (prefetching it for one run cost more than the query itself)."""
    runs = Run.objects.select_related("skill", "skill_version", "owner")
    return runs if user.is_staff else runs.filter(owner=user)


def skill_ids_of(runs: QuerySet[Run]) -> list[str]:
    """The skills these runs ran, each once, in order: the runs list's skill filter."""
    ids = runs.order_by().exclude(skill=None).values_list("skill__skill_id", flat=True).distinct()
    return sorted(set(ids))


class StatusRead(NamedTuple):
    """What GET /v1/jobs/{id} shows of a run (runs.serializers.status_payload)."""

    run: Run
    skill_id: str | None  # None until the skill of a run that brings its own arrives (R-UP4)
    skill_version: str | None
    turns: Iterable[TurnUsage]


def status_read(run: Run) -> StatusRead:
    """For a run read through runs_visible_to."""
    skill, version = run.skill, run.skill_version
    return StatusRead(
        run, skill.skill_id if skill else None, version.version if version else None, run.turn_usage.all()
    )


# The Run columns status_payload reads (with the primary key, which Run.objects.raw needs).
STATUS_FIELDS = (
    "request_id",
    "status",
    "engine",
    "model",
    "execution_mode",
    "interactive_profile",
    "attempt_number",
    "repair_round",
    "repair_rounds",
    "created_at",
    "updated_at",
    "warnings",
    "error",
    "pending_interaction_id",
    "interaction_count",
    "auto_decision_count",
    "recovery_state",
    "wait_deadline_at",
    "awaiting_upload",
    "cache_hit",
    "model_tokens",
)


@cache
def _status_run_fields(with_result: bool) -> tuple[str, ...]:
    # The options too: a view beside the service's own status (upstream's) shows some of them.
    return STATUS_FIELDS + ("runtime_options",) + (("result",) if with_result else ())


@cache
def _status_by_token_sql(with_result: bool) -> str:
    """One statement for the token, its user, one run they may see (runs_visible_to's rule) and
    its turns' usage: one row per turn, or one with null turn columns. Its columns: the run's
    fields (_status_run_fields), the skill's id, the version, the token's hash, the turn's."""
    run_columns = ", ".join(f"r.{name}" for name in _status_run_fields(with_result))
    turn_columns = ", ".join(f"u.{name} AS turn_{name}" for name in ("id", "attempt_number", *USAGE_KEYS))
    return (
        f"SELECT {run_columns}, s.skill_id AS read_skill_id, v.version AS read_skill_version,"
        f" t.key_hash AS read_key_hash, {turn_columns}"
        f" FROM {Run._meta.db_table} r"
        # LEFT: a run whose skill comes with its upload has none until then (R-UP4).
        f" LEFT JOIN {Skill._meta.db_table} s ON s.id = r.skill_id"
        f" LEFT JOIN {SkillVersion._meta.db_table} v ON v.id = r.skill_version_id"
        f" JOIN {ApiToken._meta.db_table} t ON t.lookup = %s AND t.revoked_at IS NULL AND t.last_used_at >= %s"
        " AND (t.expires_at IS NULL OR t.expires_at > %s)"
        f" JOIN {get_user_model()._meta.db_table} a ON a.id = t.user_id AND a.is_active"
        f" LEFT JOIN {TurnUsage._meta.db_table} u ON u.run_id = r.request_id"
        " WHERE r.request_id = %s AND (a.is_staff OR r.owner_id = a.id)"
        " ORDER BY u.id"
    )


def status_read_by_token(key: str, request_id: str, *, with_result: bool = False) -> StatusRead | None:
    """A run's status (and its result, `with_result`) for an API key in one raw statement, no
    queryset to compile (a status GET spent most of its time compiling its three queries). None
    for anything but a plain answer: a key that is not an active (unrevoked, unexpired) token of
    an active user, a token due for its last-used stamp (accounts.authentication sets it), a run
    that is not there or not theirs. The full path answers those, its errors included."""
    parts = split_key(key)
    try:
        run_id = uuid.UUID(request_id)
    except ValueError:
        return None
    if parts is None:
        return None  # not a key this service issues
    lookup, digest = parts
    now = timezone.now()
    stamped_since = now - timedelta(seconds=LAST_USED_RESOLUTION_SECONDS)
    params = [
        lookup,
        ApiToken._meta.get_field("last_used_at").get_db_prep_value(stamped_since, connection),
        ApiToken._meta.get_field("expires_at").get_db_prep_value(now, connection),
        Run._meta.get_field("request_id").get_db_prep_value(run_id, connection),
    ]
    fields = _status_run_fields(with_result)
    database = connections[DEFAULT_DB_ALIAS]  # this thread's own, not the proxy
    with database.cursor() as cursor:
        cursor.execute(_status_by_token_sql(with_result), params)
        rows = [row for row in cursor.fetchall() if is_key_hash(row[len(fields) + 2], digest)]
    if not rows:
        return None
    # A plain cursor and the run built from its fields: Run.objects.raw worked out the same
    # columns, converters and model layout again for every read, three times the statement's cost.
    values = list(rows[0][: len(fields)])
    for position, (converters, column) in _run_converters(database, with_result).items():
        for convert in converters:
            values[position] = convert(values[position], column, database)
    names, positions = _model_order(with_result)
    run = Run.from_db(database.alias, names, [values[position] for position in positions])
    turn_at = len(fields) + 3  # the turn's id, attempt number, then its usage
    turns = [
        TurnUsage(attempt_number=row[turn_at + 1], **dict(zip(USAGE_KEYS, row[turn_at + 2 :], strict=True)))
        for row in rows
        if row[turn_at] is not None
    ]
    skill_id, skill_version = rows[0][len(fields) : len(fields) + 2]
    return StatusRead(run, skill_id, skill_version, turns)


@cache
def _model_order(with_result: bool) -> tuple[frozenset[str], list[int]]:
    """The status read's run fields as Model.from_db takes them: their names, and their places
    in the statement in the model's order of fields."""
    fields = _status_run_fields(with_result)
    in_model_order = [field.attname for field in Run._meta.concrete_fields if field.attname in fields]
    return frozenset(fields), [fields.index(name) for name in in_model_order]


def _run_converters(database, with_result: bool) -> dict[int, Any]:
    """What the database's values of the status read's run fields go through (JSON, times), as
    Django's compiler gives them: {position: (converters, column)}; worked out once per connection
    and kept on it (kernel.compiled.converting)."""
    query, columns = _status_run_columns(with_result)
    return converting(database, (_status_run_columns, with_result), query, columns).converters


@cache
def _status_run_columns(with_result: bool) -> tuple[Query, list[Any]]:
    """The status read's run fields as columns in the statement's order, and a query of runs
    they belong to (what a compiler for their converters is made with)."""
    table, fields = Run._meta.db_table, _status_run_fields(with_result)
    columns = [field.get_col(table) for field in Run._meta.concrete_fields if field.attname in fields]
    columns.sort(key=lambda column: fields.index(column.target.attname))
    return Run.objects.none().query, columns


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


def cached_from(run: Run) -> str | None:
    """The request id of the earlier run a cache hit took its result from, as its status event
    recorded it (R-OP9); None for a run that executed."""
    if not run.cache_hit:
        return None
    event = run.events.filter(kind="status", payload__to=RunStatus.SUCCEEDED).first()
    return event.payload.get("cached_from") if event else None


def uploaded_files(run: Run) -> list[str]:
    """The input files the run was given, by their names in its upload."""
    return [path.removeprefix("uploads/") for path in runfiles.list_files(run.run_dir, "uploads")]


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


# How far back the inbox looks for something the agent said besides the question.
MESSAGES_LOOKED_BACK = 5


def message_before_question(interaction: Interaction) -> str | None:
    """What the agent last said before asking `interaction` (an intermediate message, or its final
    one when that is not the question itself), for the inbox; None when it said nothing else."""
    asked = (
        RunEvent.objects.filter(run_id=interaction.run_id, kind=EventKind.INTERACTION_PENDING)
        .filter(payload__interaction_id=interaction.interaction_id)
        .order_by("-seq")
        .values("seq")[:1]
    )
    said = RunEvent.objects.filter(run_id=interaction.run_id, seq__lt=Subquery(asked)).filter(
        Q(kind=EventKind.ASSISTANT_MESSAGE) | Q(kind=EventKind.ACTIVITY, payload__type="message")
    )
    for payload in said.order_by("-seq").values_list("payload", flat=True)[:MESSAGES_LOOKED_BACK]:
        # The prose of a message, without the JSON envelope (ask_user, the result) that may end it.
        text = str(payload.get("text") or "").split("\n{", 1)[0].strip()
        if text and text != interaction.prompt.strip() and not text.startswith("{"):
            return text
    return None


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
