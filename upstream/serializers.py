"""The shapes of upstream's answers for the OpenAPI document (the stream answers themselves are
built by upstream.fcmp and upstream.streams), and the status fields upstream's clients read."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from runs.models import Run
from runs.options import EffectiveOptions
from runs.serializers import RunStatusOutput, StateChangeOutput


class FcmpMeta(serializers.Serializer):
    attempt = serializers.IntegerField(min_value=1)
    local_seq = serializers.IntegerField(min_value=1)


class FcmpEnvelope(serializers.Serializer):
    protocol_version = serializers.CharField(help_text='"fcmp/1.0"')
    run_id = serializers.CharField()
    seq = serializers.IntegerField(min_value=1, help_text="the seq of the run event it comes from")
    ts = serializers.DateTimeField()
    engine = serializers.CharField()
    type = serializers.CharField(help_text="conversation.state.changed, user.input.required, assistant.…, …")
    data = serializers.JSONField()  # type: ignore[assignment]
    meta = FcmpMeta()
    raw_ref = serializers.JSONField(allow_null=True)


class ChatItem(serializers.Serializer):
    protocol_version = serializers.CharField(help_text='"chat-replay/1.0"')
    run_id = serializers.CharField()
    seq = serializers.IntegerField(min_value=1, help_text="the seq of the run event it comes from")
    created_at = serializers.DateTimeField()
    attempt = serializers.IntegerField(min_value=1)
    role = serializers.ChoiceField(["user", "assistant", "system"])
    kind = serializers.CharField(help_text="assistant_final, assistant_process, interaction_reply, …")
    text = serializers.CharField(allow_blank=True)
    correlation = serializers.JSONField()


class _History(serializers.Serializer):
    request_id = serializers.UUIDField()
    count = serializers.IntegerField()
    cursor_floor = serializers.IntegerField(help_text="the oldest seq the log holds (0 while it is empty)")
    cursor_ceiling = serializers.IntegerField(help_text="the newest seq this answer accounts for")
    source = serializers.CharField()  # type: ignore[assignment]


class FcmpHistory(_History):
    events = FcmpEnvelope(many=True)


class ChatHistory(_History):
    events = ChatItem(many=True)


class ReplyAnswer(StateChangeOutput):
    mode = serializers.CharField(help_text='"interaction" (upstream\'s `auth` replies are not served here)')


STATUS_FIELD_NAMES = (
    "requested_execution_mode",
    "effective_execution_mode",
    "conversation_mode",
    "interactive_auto_reply",
    "interactive_reply_timeout_sec",
    "effective_interactive_require_user_reply",
    "effective_interactive_reply_timeout_sec",
    "current_attempt",
    "pending_auth_session_id",
    "observability_ready",
)


class UpstreamStatus(RunStatusOutput):
    """GET /v1/jobs/{id}: the service's fields and upstream's optional ones (R-UP10)."""

    requested_execution_mode = serializers.CharField()
    effective_execution_mode = serializers.CharField()
    conversation_mode = serializers.CharField(help_text='"session": every run here can take replies')
    interactive_auto_reply = serializers.BooleanField()
    interactive_reply_timeout_sec = serializers.IntegerField()
    effective_interactive_require_user_reply = serializers.BooleanField()
    effective_interactive_reply_timeout_sec = serializers.IntegerField()
    current_attempt = serializers.IntegerField()
    pending_auth_session_id = serializers.CharField(allow_null=True, help_text="always null: no engine log-in here")
    observability_ready = serializers.BooleanField()

    class Meta(RunStatusOutput.Meta):
        fields = [*RunStatusOutput.Meta.fields, *STATUS_FIELD_NAMES]


class AuthSession(serializers.Serializer):
    request_id = serializers.UUIDField()
    waiting_auth = serializers.BooleanField()
    auth_session = serializers.JSONField(allow_null=True, help_text="always null")
    supported = serializers.BooleanField()
    message = serializers.CharField()


def status_fields(run: Run) -> dict[str, Any]:
    """Upstream's optional status fields, from the run's options (the seed's names, R-AD4)."""
    options = EffectiveOptions.with_defaults(run.runtime_options)
    return {
        "requested_execution_mode": run.execution_mode,
        "effective_execution_mode": run.execution_mode,
        "conversation_mode": "session",
        "interactive_auto_reply": not options.interactive_require_user_reply,
        "interactive_reply_timeout_sec": options.session_timeout_sec,
        "effective_interactive_require_user_reply": run.execution_mode == "interactive"
        and options.interactive_require_user_reply,
        "effective_interactive_reply_timeout_sec": options.session_timeout_sec,
        "current_attempt": run.attempt_number,
        "pending_auth_session_id": None,
        "observability_ready": True,
    }
