"""The shapes of upstream's stream answers, for the OpenAPI document (the answers themselves are
built by upstream.fcmp and upstream.streams)."""

from __future__ import annotations

from rest_framework import serializers


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
