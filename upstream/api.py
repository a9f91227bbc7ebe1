"""Thin views of upstream's paths (SPEC §16): those the service's own API does not have, and the
conversation streams (R-UP5). `/events` and `/events/history` serve two forms told apart by their
parameters: with one of upstream's (`cursor`; `from_seq`, `to_seq`, `from_ts`, `to_ts`) they
answer in FCMP, otherwise they are the service's own views (runs.api), unchanged."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponseRedirect
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import BasicChallenge
from kernel.errors import ApplicationError
from kernel.negotiation import JsonWhateverTheClientAccepts
from live.sse import EventStreamView as RunEventStreamView
from live.sse import follow_log, sse_response
from runs import api as jobs
from runs import replies, selectors
from runs.models import Run
from runs.serializers import ReplyInput, RunStatusOutput

from .fcmp import Reading, chat_items, fcmp_events
from .handshake import handshake
from .reply_files import FILES_PART, METADATA_PART, ReplyFileReceiver, read_metadata
from .serializers import AuthSession, ChatHistory, FcmpHistory, ReplyAnswer, UpstreamStatus, status_fields
from .streams import STREAM_PARAMETERS, ConversationFraming, Window, asks_for, cursor, history

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


def _positive(raw: str | None, name: str, default: int, most: int) -> int:
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and 0 < int(raw) <= most):
        raise ApplicationError(f"INVALID_{name.upper()}", f"{name} must be an integer from 1 to {most}")
    return int(raw)


class ManagementRunsView(BasicChallenge, APIView):
    """GET /v1/management/runs (R-UP7, R-UP10): the caller's own runs, newest first, a page at a
    time (`page`, `page_size`; `limit` stands for `page_size`, as upstream's older clients send)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("page", int, description="from 1 (default 1)"),
            OpenApiParameter("page_size", int, description=f"default {MANAGEMENT_RUNS_DEFAULT_LIMIT}"),
            OpenApiParameter("limit", int, description="page_size, when that is not given"),
        ],
        responses=inline_serializer(
            "ManagementRuns",
            {
                "runs": ManagementRunRecord(many=True),
                "page": serializers.IntegerField(),
                "page_size": serializers.IntegerField(),
                "total": serializers.IntegerField(),
                "total_pages": serializers.IntegerField(),
            },
        ),
    )
    def get(self, request):
        query = request.query_params
        limit = _positive(query.get("limit"), "limit", MANAGEMENT_RUNS_DEFAULT_LIMIT, MANAGEMENT_RUNS_MAX_LIMIT)
        page_size = _positive(query.get("page_size"), "page_size", limit, MANAGEMENT_RUNS_MAX_LIMIT)
        page = _positive(query.get("page"), "page", 1, 10**9)
        owned = Run.objects.filter(owner=request.user)
        total = owned.count()
        start = (page - 1) * page_size
        runs = owned.select_related("skill").order_by("-created_at")[start : start + page_size]
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
        return Response(
            {
                "runs": ManagementRunRecord(records, many=True).data,
                "page": page,
                "page_size": page_size,
                "total": total,
                "total_pages": -(-total // page_size),
            }
        )


class ReplyFilesView(APIView):
    """POST /v1/jobs/{id}/interaction/reply/files (R-UP6): a reply with files, decided by the same
    service as every reply; the files land in the run directory and the agent is told where."""

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
        responses=ReplyAnswer,
    )
    def post(self, request, request_id):
        run = replies.receive_reply(request.user, request_id, lambda _run: self.sent(request))
        return Response({"request_id": str(run.pk), "status": run.status, "accepted": True, "mode": INTERACTION_MODE})

    def sent(self, request) -> replies.SentReply:
        """The reply the body holds, read (its files staged) only once it is within the rate and
        the run is visible, so a refused request has nothing to leave behind."""
        reply = read_metadata(request.data)
        files = self.receiver.staged()
        if files is None and reply.text is None:
            raise ApplicationError("REPLY_FILES_INVALID", "a reply needs text, files or both")
        fields = {
            "interaction_id": reply.interaction_id,
            "response": reply.text or "",
            "idempotency_key": reply.idempotency_key,
        }
        return replies.SentReply(fields, files)


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
        description="With `after_seq` (or `Last-Event-ID`): the run's events after it, this service's own "
        "form. Otherwise upstream's FCMP history, of `from_seq`…`to_seq`, `from_ts`…`to_ts` or all of it.",
    )
    def get(self, request, request_id):
        if "after_seq" in request.query_params or "Last-Event-ID" in request.headers:
            return super().get(request, request_id)
        return _history(request, request_id, fcmp_events)


# ---- the status and reply fields upstream's clients read, and its engine log-in paths (R-UP10) --

INTERACTION_MODE = "interaction"  # a reply's `mode`: upstream's other one, `auth`, is not served here


class JobDetailView(jobs.JobDetailView):
    """GET /v1/jobs/{id}, with upstream's optional fields besides the service's own."""

    @extend_schema(responses=UpstreamStatus)
    def get(self, request, request_id):
        run = selectors.run_for(request.user, request_id)
        return Response({**RunStatusOutput(run).data, **status_fields(run)})

    def fast_answer(self, read: selectors.StatusRead) -> dict[str, Any] | None:
        body = super().fast_answer(read)
        return None if body is None else {**body, **status_fields(read.run)}


class ReplyView(jobs.ReplyView):
    @extend_schema(request=ReplyInput, responses=ReplyAnswer)
    def post(self, request, request_id):
        response = super().post(request, request_id)
        response.data["mode"] = INTERACTION_MODE
        return response


LOGIN_NOT_SUPPORTED = (
    "engine log-in is not supported here: the operator configures each engine's credentials, "
    "so a run never waits for one (waiting_auth)"
)


class AuthSessionView(APIView):
    """GET /v1/jobs/{id}/auth/session: a run here never has one (upstream's `auth_session: null`)."""

    @extend_schema(responses=AuthSession)
    def get(self, request, request_id):
        run = selectors.run_for(request.user, request_id)
        return Response(
            {
                "request_id": str(run.pk),
                "waiting_auth": False,
                "auth_session": None,
                "supported": False,
                "message": LOGIN_NOT_SUPPORTED,
            }
        )


class AuthImportView(APIView):
    """POST /v1/jobs/{id}/interaction/auth/import: refused as upstream refuses an engine that
    takes no imported credentials (422), never as a run that is gone."""

    @extend_schema(request=None, responses={422: OpenApiTypes.OBJECT})
    def post(self, request, request_id):
        selectors.run_for(request.user, request_id)
        raise ApplicationError("AUTH_IMPORT_UNSUPPORTED", LOGIN_NOT_SUPPORTED, status_code=422)
