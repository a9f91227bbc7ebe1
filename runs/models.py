"""A run and what it leaves behind: its interactions (the audit trail of questions and answers),
its numbered events, the usage of each turn; and the rows that coordinate workers (the dispatch
lock, the registry of recovered workers). State changes go through runs.services, never here."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, models
from django.urls import reverse

from engines.replies import question_fields, readable_reply
from kernel.compiled import WrittenInsert, WrittenUpdate

from .options import EffectiveOptions

if TYPE_CHECKING:
    from skills.models import SkillVersion


class RunStatus(models.TextChoices):
    """Each status's label is its one name for people: the pages, the run page's script and the
    admin all show it."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    WAITING_USER = "waiting_user", "Waiting for you"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


TERMINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELED})


class ExecutionMode(models.TextChoices):
    AUTO = "auto"
    INTERACTIVE = "interactive"


class InteractiveProfile(models.TextChoices):
    RESUMABLE = "resumable"
    STICKY_PROCESS = "sticky_process"


class RecoveryState(models.TextChoices):
    NONE = "none"
    RECOVERED_WAITING = "recovered_waiting"
    FAILED_RECONCILED = "failed_reconciled"


class Run(models.Model):
    """One execution of one skill version on one engine. Changed only through runs.services."""

    request_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    # Null only while a run whose skill comes with its upload waits for it (R-UP4).
    skill = models.ForeignKey("skills.Skill", null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    skill_version = models.ForeignKey(
        "skills.SkillVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    engine = models.CharField(max_length=32, db_index=True)
    model = models.CharField(max_length=128, blank=True)
    execution_mode = models.CharField(max_length=16, choices=ExecutionMode.choices)
    interactive_profile = models.CharField(max_length=16, choices=InteractiveProfile.choices)
    input = models.JSONField(default=dict)
    parameter = models.JSONField(default=dict)
    runtime_options = models.JSONField(default=dict, help_text="effective runtime options")
    admission_request = models.JSONField(
        default=dict, blank=True, help_text="what the create request asked that is decided once the skill arrives"
    )

    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    awaiting_upload = models.BooleanField(
        default=False, help_text="file inputs still to be uploaded; not dispatched yet"
    )
    attempt_number = models.PositiveIntegerField(default=1)
    repair_round = models.PositiveIntegerField(
        default=0, help_text="the output-repair round the current attempt is (R-RP1); 0 when it is none"
    )
    repair_rounds = models.PositiveIntegerField(
        default=0, help_text="repair rounds this run has had; they do not count toward max_attempt"
    )
    next_prompt = models.TextField(blank=True, help_text="prompt of the next resumed turn (the reply)")
    session_handle = models.CharField(max_length=256, blank=True)
    error = models.JSONField(null=True, blank=True)
    warnings = models.JSONField(default=list, blank=True)
    result = models.JSONField(null=True, blank=True)
    pending_interaction_id = models.PositiveIntegerField(null=True, blank=True)
    interaction_count = models.PositiveIntegerField(default=0)
    auto_decision_count = models.PositiveIntegerField(default=0)
    recovery_state = models.CharField(max_length=24, choices=RecoveryState.choices, default=RecoveryState.NONE)
    wait_deadline_at = models.DateTimeField(null=True, blank=True, db_index=True)

    holds_slot = models.BooleanField(default=False)
    claimed_by = models.CharField(max_length=128, blank=True, help_text="worker holding the running turn")
    offered_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="when a task for this queued turn was last enqueued"
    )
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    engine_pid = models.IntegerField(null=True, blank=True)
    last_event_seq = models.PositiveIntegerField(default=0)
    model_tokens = models.PositiveBigIntegerField(
        default=0, help_text="model tokens the provider reported through the relay, all turns (R-SB9)"
    )
    cache_key = models.CharField(max_length=64, blank=True, help_text="set on cacheable auto runs")
    cache_hit = models.BooleanField(default=False, help_text="the result was reused from an identical earlier run")

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    files_removed_at = models.DateTimeField(
        null=True, blank=True, help_text="when retention removed the run's folders (SKILLRUNNER_RUN_RETENTION_DAYS)"
    )

    # Not a column: set at admission when a callback URL was registered (hooks.callback_requested),
    # for the one answer that shows its signing secret.
    callback_secret = ""

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "-created_at"]),
            models.Index(fields=["status", "created_at"]),
            # An owner's runs ready to dispatch, oldest first (services.dispatching): only queued
            # runs are in it, so finding an owner's next turns never reads their history.
            models.Index(
                fields=["owner", "created_at"],
                condition=models.Q(status=RunStatus.QUEUED, awaiting_upload=False),
                name="runs_run_ready_by_owner",
            ),
            # An owner's earlier run with the same key (runs.cache): both columns, or SQLite, which
            # keeps no statistics, reads the owner's whole history for it.
            models.Index(fields=["owner", "cache_key"], name="runs_run_cache_by_owner"),
            # An owner's queued runs, their share of the queue (services.admission): counted
            # without reading their history or anyone else's backlog (R-SC1).
            models.Index(
                fields=["owner"], condition=models.Q(status=RunStatus.QUEUED), name="runs_run_queued_by_owner"
            ),
            # The few runs holding a slot and their owners (services.dispatching). Partial: SQLite
            # uses no index on a bare boolean for Django's `WHERE "holds_slot"`, this one it does.
            models.Index(fields=["owner"], condition=models.Q(holds_slot=True), name="runs_run_slot_holders"),
            # What retention still has to remove, oldest first (runs.retention).
            models.Index(
                fields=["finished_at"], condition=models.Q(files_removed_at__isnull=True), name="runs_run_unexpired"
            ),
        ]

    def __str__(self) -> str:
        return str(self.request_id)

    def get_absolute_url(self) -> str:
        """The run's page (the admin's "View on site")."""
        return reverse("ui:run-detail", args=[self.request_id])

    # A run is saved at each change of its state, and each save wrote every one of its 40-odd
    # columns: Django built and bound them all, and SQLite rewrote each index of the table, changed
    # or not. That was 13% of a turn's CPU in the worker (issue #43). So a run read whole, or
    # saved, remembers its columns as stored, and a save writes the ones that differ: the JSON
    # ones always (they can change in place, unseen), `updated_at` always (auto_now). That save
    # and a new run's insert are statements written out (kernel.compiled): nothing listens to a
    # run's save signals, and Django built its UPDATE in three times what the whole save now takes.

    @classmethod
    def from_db(cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any) -> Run:
        run = super().from_db(db, field_names, values, **kwargs)
        if len(values) == len(cls._meta.concrete_fields):  # not .only() or .defer(): Django handles those
            run._as_stored = tuple(values)
        return run

    def save(self, *args: Any, **kwargs: Any) -> None:
        as_stored: tuple[Any, ...] | None = self.__dict__.get("_as_stored")
        written: list[str] | None = None  # the columns written, None for all
        if args or kwargs or not (self._state.adding or as_stored is not None):
            super().save(*args, **kwargs)  # what the services never ask for, Django does
            written = kwargs.get("update_fields")
        elif self._state.adding:
            if self.pk is None:  # a copy to insert: a new id, as Django's save gives it
                self.pk = self._meta.pk.get_pk_value_on_save(self)
            _RUN_INSERT.insert([self])
            self._state.adding, self._state.db = False, DEFAULT_DB_ALIAS
        else:
            written = [field.attname for field, stored in self._stored() if _to_write(self, field, stored)]
            if not _RUN_UPDATE.update(self, written):
                raise DatabaseError("Save with update_fields did not affect any rows.")  # as Django's
        if as_stored is not None:
            self._as_stored = tuple(
                getattr(self, field.attname) if written is None or _named(field, written) else stored
                for field, stored in self._stored()
            )
        elif written is None and not self.get_deferred_fields():  # inserted, or saved whole
            self._as_stored = tuple(getattr(self, field.attname) for field in self._meta.concrete_fields)

    def _stored(self) -> zip[tuple[models.Field[Any, Any], Any]]:
        return zip(self._meta.concrete_fields, self._as_stored, strict=True)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def version(self) -> SkillVersion:
        """The skill version of a run that has one: every run but one still waiting for its own
        skill's upload (R-UP4), which never runs a turn."""
        version = self.skill_version
        if version is None:
            raise ValueError(f"run {self.pk} has no skill yet: its package was never uploaded")
        return version

    @property
    def skill_key(self) -> str:
        """The skill's id (`skill_id` is the column of the foreign key); see `version`."""
        skill = self.skill
        if skill is None:
            raise ValueError(f"run {self.pk} has no skill yet: its package was never uploaded")
        return skill.skill_id

    @property
    def options(self) -> EffectiveOptions:
        """The effective runtime options, typed; `runtime_options` is their stored form."""
        return EffectiveOptions.with_defaults(self.runtime_options or {})

    @property
    def run_dir(self) -> Path:
        """The agent's working directory (its cwd, writable inside its sandbox): read only
        through runs.runfiles, since the agent decides what every name in it is."""
        return settings.DATA_DIR / "runs" / str(self.request_id)

    @property
    def records_dir(self) -> Path:
        """What the service writes about the run (logs, bundle): outside the agent's reach (R-SB7)."""
        return settings.DATA_DIR / "run-records" / str(self.request_id)


_ALWAYS_WRITTEN = frozenset(
    [field.attname for field in Run._meta.concrete_fields if isinstance(field, models.JSONField)] + ["updated_at"]
)


_RUN_INSERT = WrittenInsert(Run, *(field.name for field in Run._meta.concrete_fields))
_RUN_UPDATE = WrittenUpdate(Run)


def _to_write(run: Run, field: models.Field[Any, Any], stored: Any) -> bool:
    return not field.primary_key and (field.attname in _ALWAYS_WRITTEN or getattr(run, field.attname) != stored)


def _named(field: models.Field[Any, Any], names: Any) -> bool:
    """Whether `update_fields` (names or attnames, as Django takes them) names `field`."""
    return field.attname in names or field.name in names


class Interaction(models.Model):
    """A question a run waited on and the answer it got; never edited once answered (R-LC6)."""

    class ResolutionMode(models.TextChoices):
        USER_REPLY = "user_reply"
        AUTO_DECIDE_TIMEOUT = "auto_decide_timeout"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="interactions")
    interaction_id = models.PositiveIntegerField()
    attempt_number = models.PositiveIntegerField()
    kind = models.CharField(max_length=32, default="open_text")
    prompt = models.TextField()
    payload = models.JSONField(help_text="the pending payload as served to clients")
    asked_at = models.DateTimeField(auto_now_add=True)
    response = models.JSONField(null=True, blank=True)
    resolution_mode = models.CharField(max_length=24, choices=ResolutionMode.choices, blank=True)
    idempotency_key = models.CharField(max_length=128, blank=True)
    answered_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "interaction_id"]
        constraints = [models.UniqueConstraint(fields=["run", "interaction_id"], name="unique_interaction_per_run")]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.interaction_id}"

    @property
    def answer_text(self) -> str:
        """The answer as people and the agent read it (a structured reply in words)."""
        return readable_reply(self.response, question_fields(self.payload))

    @property
    def quick_replies(self) -> list[str]:
        """The quick-reply buttons' captions, in the options' order (R-FS4)."""
        return [option_caption(option) for option in self.payload.get("options") or []]

    def option_value(self, index: int) -> Any:
        """The value the option at `index` sends; IndexError for no such option."""
        options = self.payload.get("options") or []
        if not 0 <= index < len(options):
            raise IndexError(index)
        option = options[index]
        return option.get("value", option.get("label", ""))


def option_caption(option: dict[str, Any]) -> str:
    """A quick reply shows its label and, whenever it differs, the value it sends (R-FS4): an
    agent cannot record an answer the person never saw."""
    label = str(option.get("label", ""))
    value = option.get("value", label)
    sent = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return label if sent == label else f"{label} → {sent}"


class EventKind(models.TextChoices):
    STATUS = "status"
    WARNING = "warning"
    RESULT = "result"
    INPUT_UPLOADED = "input_uploaded"
    ASSISTANT_MESSAGE = "assistant_message"
    INTERACTION_PENDING = "interaction_pending"
    INTERACTION_REPLY = "interaction_reply"
    RECOVERED = "recovered"
    REPAIR = "repair"
    ACTIVITY = "activity"
    ACTIVITY_TRUNCATED = "activity_truncated"
    SECURITY = "security"  # a request the provider relay refused, or a key found in an output (R-SB8, R-SB10)


class RunEvent(models.Model):
    """The append-only log of a run (R-UI1): the single source for history, SSE and websocket."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=32, choices=EventKind.choices)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_event_seq_per_run")]
        indexes = [
            # The few security events among all runs' events: the admin's filter and column, and the
            # places already recorded (services.security), without reading the log.
            models.Index(fields=["run"], condition=models.Q(kind="security"), name="runs_runevent_security"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.seq} {self.kind}"

    def as_message(self) -> dict:
        return {
            "type": "event",
            "seq": self.seq,
            "kind": self.kind,
            "payload": self.payload,
            "ts": self.created_at.isoformat(),
        }


class TokenSpend(models.Model):
    """Model tokens one user's runs spent on one day (R-SB9), counted at the relay as they go."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "day"], name="unique_token_spend_per_day")]

    def __str__(self) -> str:
        return f"{self.owner_id} {self.day}: {self.tokens}"


class DispatchLock(models.Model):
    """A single row locked to serialise slot accounting across processes and machines (R-LC8)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)


# An owner never served counts as served least recently: before anyone served at any real time.
NEVER_SERVED = datetime(1970, 1, 1, tzinfo=UTC)


class OwnerQueue(models.Model):
    """An owner's place in the dispatch order (R-FS1, R-SC1): when a turn of theirs last took a
    slot, and the creation time of their oldest run ready to dispatch (queued, not awaiting its
    upload; null when none) and how many they have. Kept in the transactions that change either (services.dispatching),
    so dispatch picks the next owners from an index instead of reading the whole queue."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="turn_queue"
    )
    last_served_at = models.DateTimeField(default=NEVER_SERVED)
    oldest_ready_at = models.DateTimeField(null=True, blank=True)
    # How many runs of theirs are ready: summed over the owners in the queue, the queue's length
    # without reading it (services.admission, R-SC1).
    ready_count = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            # The dispatch order; only owners with a ready run are in it.
            models.Index(
                fields=["last_served_at", "oldest_ready_at", "owner"],
                condition=models.Q(oldest_ready_at__isnull=False),
                name="runs_ownerqueue_turn_order",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} served {self.last_served_at:%Y-%m-%d %H:%M:%S}"


class WorkerCluster(models.Model):
    """A running `manage.py worker` that finished its start-up recovery (R-LC13, R-OP7): written
    once recovery is done and its cluster runs, renewed while the cluster lives, deleted at stop."""

    token = models.CharField(max_length=32, primary_key=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    recovered_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    # Stopping (R-OP10): it takes no more turns and lets those it runs finish.
    draining = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.token}"


class TurnUsage(models.Model):
    """Tokens, cost and duration of one turn (R-AC4): counts as the engine reported them, null
    where it reported nothing; the duration is measured by the worker."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="turn_usage")
    attempt_number = models.PositiveIntegerField()
    input_tokens = models.BigIntegerField(null=True, blank=True, help_text="all input, cached included")
    cached_input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    reasoning_tokens = models.BigIntegerField(null=True, blank=True)
    cost_usd = models.FloatField(null=True, blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["run", "id"]

    def __str__(self) -> str:
        return f"{self.run_id} turn {self.attempt_number}"
