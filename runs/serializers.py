"""Request parsing and response shapes of the job API (SPEC §8)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import Run
from .selectors import STATUS_FIELDS, StatusRead, status_read
from .usage import GROUPS, run_usage

SKILL_SOURCES = ("installed", "temp_upload")


class RunCreateInput(serializers.Serializer):
    skill_source = serializers.ChoiceField(
        choices=SKILL_SOURCES,
        default="installed",
        help_text="temp_upload: no skill_id; the skill package comes with POST /v1/jobs/{id}/upload, for this run only",
    )
    skill_id = serializers.CharField(max_length=128, required=False)
    engine = serializers.CharField(max_length=32, default="codex")
    model = serializers.CharField(max_length=128, required=False, allow_blank=True, allow_null=True)
    provider_id = serializers.CharField(
        max_length=64, required=False, allow_blank=True, allow_null=True, help_text="must be the engine's provider"
    )
    effort = serializers.CharField(
        max_length=32,
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="reasoning effort, where the engine has one",
    )
    input = serializers.DictField(required=False, default=dict)
    parameter = serializers.DictField(required=False, default=dict)
    runtime_options = serializers.DictField(required=False, default=dict)
    callback_url = serializers.URLField(
        max_length=2048, required=False, help_text="receives this run's webhook events, signed (R-NT1)"
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        temporary = attrs["skill_source"] == "temp_upload"
        if temporary and attrs.get("skill_id"):
            raise serializers.ValidationError({"skill_id": "must be absent with skill_source temp_upload"})
        if not temporary and not attrs.get("skill_id"):
            raise serializers.ValidationError({"skill_id": "This field is required."})
        return attrs


class RunCreateOutput(serializers.Serializer):
    request_id = serializers.UUIDField()
    cache_hit = serializers.BooleanField()
    status = serializers.CharField(allow_null=True, help_text="null while the run waits for its input files upload")
    callback_secret = serializers.CharField(
        required=False, help_text="signs the deliveries to callback_url; only when one was given, shown only here"
    )


class CodedMessage(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class UsageFigures(serializers.Serializer):
    """R-AC4: null where the engine reported nothing (the duration is measured by the worker)."""

    input_tokens = serializers.IntegerField(allow_null=True, help_text="all input tokens, cached included")
    cached_input_tokens = serializers.IntegerField(allow_null=True)
    output_tokens = serializers.IntegerField(allow_null=True)
    reasoning_tokens = serializers.IntegerField(allow_null=True)
    cost_usd = serializers.FloatField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)


class TurnUsageOutput(UsageFigures):
    attempt = serializers.IntegerField()


class RunUsageOutput(UsageFigures):
    turns = TurnUsageOutput(many=True)


class UsageQuery(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="turns finished at or after (ISO 8601)")
    until = serializers.DateTimeField(required=False, help_text="turns finished before (ISO 8601)")
    group_by = serializers.ChoiceField(choices=list(GROUPS), default="day")


class UsageGroupOutput(UsageFigures):
    group = serializers.CharField(help_text="skill id, engine, username or day (YYYY-MM-DD)")
    runs = serializers.IntegerField()
    turns = serializers.IntegerField()


class UsageOutput(serializers.Serializer):
    group_by = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)
    groups = UsageGroupOutput(many=True)


class RunStatusOutput(serializers.ModelSerializer):
    skill_id = serializers.CharField(
        source="skill.skill_id", allow_null=True, help_text="null until a run's own skill is uploaded"
    )
    skill_version = serializers.CharField(source="skill_version.version", allow_null=True)
    error = CodedMessage(allow_null=True)
    warnings = CodedMessage(many=True)
    awaiting_upload = serializers.BooleanField()
    usage = serializers.SerializerMethodField()

    class Meta:
        model = Run
        # The run's own columns (which the status read selects), its skill after its status.
        fields = [*STATUS_FIELDS[:2], "skill_id", "skill_version", *STATUS_FIELDS[2:], "usage"]

    @extend_schema_field(RunUsageOutput)
    def get_usage(self, run: Run) -> dict:
        return run_usage(run.turn_usage.all())

    def to_representation(self, run: Run) -> dict[str, Any]:
        """The fields above describe the shape (OpenAPI); building them per serializer (a deep
        copy of two dozen fields) took 1 ms of a 6 ms status GET, so the data comes from
        status_payload, which a test holds to the fields' own rendering."""
        return status_payload(status_read(run))


_TIMESTAMP = serializers.DateTimeField()  # DRF's rendering of a datetime, used field by field


def _timestamp(value: datetime | None) -> str | None:
    return None if value is None else _TIMESTAMP.to_representation(value)


def _coded(message: dict[str, Any]) -> dict[str, str]:
    return {"code": str(message["code"]), "message": str(message["message"])}


# What a run's error may tell besides its code and message (BUDGET_EXCEEDED: which budget, how
# much of it was used).
ERROR_DETAILS = ("which", "used", "limit")


def _coded_error(error: dict[str, Any]) -> dict[str, Any]:
    return {**_coded(error), **{key: error[key] for key in ERROR_DETAILS if key in error}}


def status_payload(read: StatusRead) -> dict[str, Any]:
    """GET /v1/jobs/{id}, and each run of GET /v1/jobs (RunStatusOutput's shape)."""
    run = read.run
    return {
        "request_id": str(run.request_id),
        "status": run.status,
        "skill_id": read.skill_id,
        "skill_version": read.skill_version,
        "engine": run.engine,
        "model": run.model,
        "execution_mode": run.execution_mode,
        "interactive_profile": run.interactive_profile,
        "attempt_number": run.attempt_number,
        "repair_round": run.repair_round,
        "repair_rounds": run.repair_rounds,
        "created_at": _timestamp(run.created_at),
        "updated_at": _timestamp(run.updated_at),
        "warnings": [_coded(warning) for warning in run.warnings],
        "error": _coded_error(run.error) if run.error is not None else None,
        "pending_interaction_id": run.pending_interaction_id,
        "interaction_count": run.interaction_count,
        "auto_decision_count": run.auto_decision_count,
        "recovery_state": run.recovery_state,
        "wait_deadline_at": _timestamp(run.wait_deadline_at),
        "awaiting_upload": run.awaiting_upload,
        "cache_hit": run.cache_hit,
        "model_tokens": run.model_tokens,
        "usage": run_usage(read.turns),
    }


class UploadOutput(serializers.Serializer):
    request_id = serializers.UUIDField()
    cache_hit = serializers.BooleanField()
    status = serializers.CharField()
    extracted_files = serializers.ListField(child=serializers.CharField())


class StateChangeOutput(serializers.Serializer):
    request_id = serializers.UUIDField()
    status = serializers.CharField()
    accepted = serializers.BooleanField()


class CancelOutput(StateChangeOutput):
    run_id = serializers.UUIDField(help_text="the same as request_id (upstream's clients read both)")
    message = serializers.CharField()


class ReplyInput(serializers.Serializer):
    interaction_id = serializers.IntegerField(min_value=1)
    response = serializers.JSONField(
        allow_null=True, help_text="free text as a rule; any JSON value is accepted (R-LC5)"
    )
    idempotency_key = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")


class PendingOutput(serializers.Serializer):
    request_id = serializers.UUIDField()
    status = serializers.CharField()
    pending = serializers.JSONField(allow_null=True)


class InteractionRecord(serializers.Serializer):
    interaction_id = serializers.IntegerField()
    attempt_number = serializers.IntegerField()
    kind = serializers.CharField()
    prompt = serializers.CharField()
    payload = serializers.JSONField()
    asked_at = serializers.DateTimeField()
    response = serializers.JSONField(allow_null=True)
    resolution_mode = serializers.CharField(allow_null=True)
    answered_at = serializers.DateTimeField(allow_null=True)
    answered_by = serializers.CharField(source="answered_by.username", allow_null=True, default=None)


class ResultEnvelope(serializers.Serializer):
    status = serializers.CharField()
    # The R-OU2 field is named `data`; this serializer only documents the envelope, so shadowing
    # Serializer.data is harmless here.
    data = serializers.JSONField(allow_null=True)  # type: ignore[assignment]
    artifacts = serializers.ListField(child=serializers.CharField())
    repair_level = serializers.CharField()
    validation_warnings = CodedMessage(many=True)
    error = CodedMessage(allow_null=True)


class ResultOutput(serializers.Serializer):
    request_id = serializers.UUIDField()
    result = ResultEnvelope()


class EventRecord(serializers.Serializer):
    seq = serializers.IntegerField()
    kind = serializers.CharField()
    payload = serializers.JSONField()
    ts = serializers.DateTimeField(source="created_at")


class AttemptLogSizes(serializers.Serializer):
    attempt_number = serializers.IntegerField()
    prompt_bytes = serializers.IntegerField()
    stdout_bytes = serializers.IntegerField()
    stderr_bytes = serializers.IntegerField()


class LogsOutput(serializers.Serializer):
    """One attempt's logs, each text at most SKILLRUNNER_LOG_TEXT_MAX_BYTES from its start; the
    whole of a stream comes from `?attempt=N&stream=<name>` (R-FS2)."""

    request_id = serializers.UUIDField()
    attempt_number = serializers.IntegerField(allow_null=True, help_text="the attempt shown; null before any")
    prompt = serializers.CharField()
    stdout = serializers.CharField()
    stderr = serializers.CharField()
    prompt_bytes = serializers.IntegerField(help_text="size of the whole log")
    stdout_bytes = serializers.IntegerField()
    stderr_bytes = serializers.IntegerField()
    prompt_truncated = serializers.BooleanField()
    stdout_truncated = serializers.BooleanField()
    stderr_truncated = serializers.BooleanField()
    attempts = AttemptLogSizes(many=True, help_text="every attempt with logs, oldest first (sizes, no texts)")
