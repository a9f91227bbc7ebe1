"""Thin views of upstream's paths (SPEC §16): those the service's own API does not have, and the
conversation streams (R-UP5). `/events` and `/events/history` serve two forms told apart by their
parameters: with one of upstream's (`cursor`; `from_seq`, `to_seq`, `from_ts`, `to_ts`) they
answer in FCMP, otherwise they are the service's own views (runs.api), unchanged."""

from __future__ import annotations

from django.http import HttpResponseRedirect
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from accounts.authentication import BasicChallenge
from live.sse import EventStreamView as RunEventStreamView
from live.sse import follow_log, sse_response
from runs import api as jobs
from runs import selectors, services
from runs.models import Run
from runs.serializers import StateChangeOutput
from skillrunner.errors import ApplicationError
from skillrunner.negotiation import JsonWhateverTheClientAccepts
from skillrunner.throttles import REPLY_SCOPE

from .fcmp import Reading, chat_items, fcmp_events
from .handshake import handshake
from .reply_files import FILES_PART, METADATA_PART, ReplyFileReceiver, read_metadata
from .serializers import ChatHistory, FcmpHistory
from .streams import RANGE_PARAMETERS, STREAM_PARAMETERS, ConversationFraming, Window, asks_for, cursor, history

MANAGEMENT_RUNS_DEFAULT_LIMIT = 50
MANAGEMENT_RUNS_MAX_LIMIT = 500


class HandshakeView(APIView):
    """Open like ping (R-UP2): credentials are neither needed nor read."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=inline_serializer(
            "HandshakeRequest",
            {
                "schema": serializers.CharField(),
                "client": serializers.DictField(required=False),
                "requested_protocols": serializers.ListField(child=serializers.CharField(), required=False),
            },
        ),
        responses=inline_serializer(
            "HandshakeResponse",
            {
                "schema": serializers.CharField(),
                "backend": serializers.DictField(),
                "protocols": serializers.DictField(),
            },
        ),
    )
    def post(self, request):
        return Response(handshake(request.data))


class ManagementRunRecord(serializers.Serializer):
    request_id = serializers.UUIDField()
    run_id = serializers.UUIDField(help_text="the same id: a request here is one run")
    status = serializers.CharField()
    engine = serializers.CharField()
    model = serializers.CharField()
    skill_id = serializers.CharField(allow_null=True)
    updated_at = serializers.DateTimeField()
    pending_interaction_id = serializers.IntegerField(allow_null=True)
    interaction_count = serializers.IntegerField()


def _limit(raw: str | None) -> int:
    if raw is None:
        return MANAGEMENT_RUNS_DEFAULT_LIMIT
    if not (raw.isascii() and raw.isdigit() and 0 < int(raw) <= MANAGEMENT_RUNS_MAX_LIMIT):
        raise ApplicationError("INVALID_LIMIT", f"limit must be an integer from 1 to {MANAGEMENT_RUNS_MAX_LIMIT}")
    return int(raw)


class ManagementRunsView(BasicChallenge, APIView):
    """GET /v1/management/runs (R-UP7): the caller's own runs, newest first."""

    @extend_schema(
        parameters=[OpenApiParameter("limit", int)],
        responses=inline_serializer("ManagementRuns", {"runs": ManagementRunRecord(many=True)}),
    )
    def get(self, request):
        limit = _limit(request.query_params.get("limit"))
        runs = Run.objects.filter(owner=request.user).select_related("skill").order_by("-created_at")[:limit]
        records = [
            {
                "request_id": run.pk,
                "run_id": run.pk,
                "status": run.status,
                "engine": run.engine,
                "model": run.model,
                "skill_id": run.skill.skill_id if run.skill else None,
                "updated_at": run.updated_at,
                "pending_interaction_id": run.pending_interaction_id,
                "interaction_count": run.interaction_count,
            }
            for run in runs
        ]
        return Response({"runs": ManagementRunRecord(records, many=True).data})


class ReplyFilesView(APIView):
    """POST /v1/jobs/{id}/interaction/reply/files (R-UP6): a reply with files, decided by the same
    service as every reply; the files land in the run directory and the agent is told where."""

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = REPLY_SCOPE
    parser_classes = [MultiPartParser]

    def dispatch(self, request, *args, **kwargs):
        # In place before anything reads the body (authentication may, for a session's CSRF check).
        self.receiver = ReplyFileReceiver()
        request.upload_handlers = [self.receiver]
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            self.receiver.discard()  # whatever did not move into the run

    @extend_schema(
        request={
            "multipart/form-data": inline_serializer(
                "ReplyFilesRequest",
                {
                    METADATA_PART: serializers.CharField(
                        help_text="JSON {interaction_id, idempotency_key?, text?}; upstream's `message` "
                        "stands for `text`, its `bindings` are accepted and not used"
                    ),
                    FILES_PART: serializers.ListField(
                        child=serializers.FileField(), required=False, help_text="repeat the part for each file"
                    ),
                },
            )
        },
        responses=StateChangeOutput,
    )
    def post(self, request, request_id):
        run = selectors.run_for(request.user, request_id)
        reply = read_metadata(request.data)
        files = self.receiver.staged()
        if files is None and reply.text is None:
            raise ApplicationError("REPLY_FILES_INVALID", "a reply needs text, files or both")
        run = services.submit_reply(
            run,
            user=request.user,
            interaction_id=reply.interaction_id,
            response=reply.text or "",
            idempotency_key=reply.idempotency_key,
            files=files,
        )
        return Response({"request_id": str(run.pk), "status": run.status, "accepted": True})


def ui(request) -> HttpResponseRedirect:
    """`<base>/ui`, which upstream's client opens for its management dialog: the run list."""
    return HttpResponseRedirect(reverse("ui:run-list"))


# ---- conversation streams (R-UP5) -------------------------------------------------------------

CURSOR = OpenApiParameter("cursor", int, description="the last seq the client has; the stream sends what follows")
AFTER_SEQ = OpenApiParameter("after_seq", int, description="the service's own form: the last seq the client has")
RANGE = [
    OpenApiParameter("from_seq", int, description="the first seq to include"),
    OpenApiParameter("to_seq", int, description="the last seq to include"),
    OpenApiParameter("from_ts", OpenApiTypes.DATETIME, description="the earliest time to include"),
    OpenApiParameter("to_ts", OpenApiTypes.DATETIME, description="the latest time to include"),
]
SSE = {(200, "text/event-stream"): OpenApiTypes.STR}


def _conversation(request, request_id, reading: Reading):
    run = selectors.run_for(request.user, request_id)
    framing = ConversationFraming(run, cursor(request.query_params), reading)
    return sse_response(request, lambda connection: follow_log(run.pk, framing.cursor, connection, framing))


def _history(request, request_id, reading: Reading) -> Response:
    run = selectors.run_for(request.user, request_id)
    return Response(history(run, Window.of(request.query_params), reading))


class ChatStreamView(APIView):
    """GET /v1/jobs/{id}/chat: the conversation as upstream's chat items, live."""

    content_negotiation_class = JsonWhateverTheClientAccepts  # errors as JSON to an EventSource too

    @extend_schema(parameters=[CURSOR], responses=SSE)
    def get(self, request, request_id):
        return _conversation(request, request_id, chat_items)


class ChatHistoryView(APIView):
    """GET /v1/jobs/{id}/chat/history: the conversation's chat items in a range."""

    @extend_schema(parameters=RANGE, responses=ChatHistory)
    def get(self, request, request_id):
        return _history(request, request_id, chat_items)


class EventStreamView(RunEventStreamView):
    @extend_schema(
        parameters=[AFTER_SEQ, CURSOR],
        responses=SSE,
        description="With `cursor`: upstream's stream (a `snapshot`, then FCMP envelopes as `chat_event`, "
        "`heartbeat`s; it ends once the run waits for its user or has ended). Otherwise the run's events "
        "as they are, named by kind, ending with `end`.",
    )
    def get(self, request, request_id):
        if asks_for(request.query_params, STREAM_PARAMETERS):
            return _conversation(request, request_id, fcmp_events)
        return super().get(request, request_id)


class EventHistoryView(jobs.EventHistoryView):
    @extend_schema(
        parameters=[AFTER_SEQ, *RANGE],
        responses=PolymorphicProxySerializer(
            component_name="EventHistoryForms",
            serializers=[jobs.EventHistory, FcmpHistory],
            resource_type_field_name=None,
        ),
        description="With `from_seq`, `to_seq`, `from_ts` or `to_ts`: upstream's FCMP history. Otherwise "
        "the run's events after `after_seq`.",
    )
    def get(self, request, request_id):
        if asks_for(request.query_params, RANGE_PARAMETERS):
            return _history(request, request_id, fcmp_events)
        return super().get(request, request_id)
