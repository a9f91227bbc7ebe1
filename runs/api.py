"""The /v1/jobs API: thin views over runs.services (writes) and runs.selectors (reads)."""

from __future__ import annotations

import io
from typing import Any, BinaryIO

from django.conf import settings
from django.http import FileResponse, HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from accounts.authentication import parse_token_header
from enginehost.config import configured_secrets
from kernel.api_errors import is_unavailable
from kernel.byte_ranges import RangeNotSatisfiable, file_chunks, requested_range
from kernel.errors import ApplicationError, Conflict, NotFound
from kernel.middleware import oversized_body
from kernel.negotiation import JsonWhateverTheClientAccepts
from kernel.throttles import RUN_CREATE_SCOPE

from . import replies, selectors, services
from .bundles import bundle_path
from .models import Run, RunStatus
from .outcome import list_artifacts
from .output_keys import served_artifact
from .serializers import (
    CancelOutput,
    EventRecord,
    InteractionRecord,
    LogsOutput,
    PendingOutput,
    ReplyInput,
    ResultOutput,
    RunCreateInput,
    RunCreateOutput,
    RunStatusOutput,
    StateChangeOutput,
    UploadOutput,
    UsageOutput,
    UsageQuery,
    status_payload,
)
from .usage import aggregate


class RunPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class JobListCreateView(APIView):
    throttle_scope = RUN_CREATE_SCOPE

    def get_throttles(self):
        return [ScopedRateThrottle()] if self.request.method == "POST" else []

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=[s.value for s in RunStatus]),
            OpenApiParameter("skill_id", str),
            OpenApiParameter("page", int),
            OpenApiParameter("page_size", int),
        ],
        responses=RunStatusOutput(many=True),
    )
    def get(self, request):
        runs = selectors.runs_visible_to(request.user).prefetch_related("turn_usage")
        status_filter = request.query_params.get("status")
        if status_filter:
            if status_filter not in RunStatus.values:
                raise ApplicationError("INVALID_FILTER", f"status must be one of {', '.join(RunStatus.values)}")
            runs = runs.filter(status=status_filter)
        if skill_id := request.query_params.get("skill_id"):
            runs = runs.filter(skill__skill_id=skill_id)
        paginator = RunPagination()
        page = paginator.paginate_queryset(runs.order_by("-created_at"), request, view=self)
        return paginator.get_paginated_response(RunStatusOutput(page, many=True).data)

    @extend_schema(request=RunCreateInput, responses=RunCreateOutput)
    def post(self, request):
        payload = RunCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        run = services.create_run(
            owner=request.user,
            skill_id=data.get("skill_id"),
            provider_id=data.get("provider_id"),
            effort=(data.get("effort") or "").strip().lower(),
            engine=data["engine"],
            model=data.get("model"),
            input=data["input"],
            parameter=data["parameter"],
            runtime_options=data["runtime_options"],
            callback_url=data.get("callback_url"),
        )
        answer = {
            "request_id": str(run.pk),
            "cache_hit": run.cache_hit,
            "status": None if run.awaiting_upload else run.status,
        }
        if run.callback_secret:
            answer["callback_secret"] = run.callback_secret
        return Response(answer)


class JobUploadView(APIView):
    parser_classes = [MultiPartParser, FormParser]
    answers_oversized_body = True  # refused here, so that the run it was for ends too (R-UP8)

    @extend_schema(
        request={
            "multipart/form-data": inline_serializer(
                "JobUpload",
                {
                    "file": serializers.FileField(required=False, help_text="the input files, zipped"),
                    "skill_package": serializers.FileField(
                        required=False, help_text="the skill, zipped, for a run created without one (temp_upload)"
                    ),
                },
            )
        },
        responses=UploadOutput,
    )
    def post(self, request, request_id):
        run = selectors.run_for(request.user, request_id)
        too_large = oversized_body(request)
        if too_large is not None:
            services.fail_awaiting_upload(run.pk, too_large.code, too_large.message)
            raise too_large
        extracted = services.receive_upload(
            run, package=request.FILES.get("skill_package"), files=request.FILES.get("file")
        )
        run.refresh_from_db()
        return Response(
            {"request_id": str(run.pk), "cache_hit": run.cache_hit, "status": run.status, "extracted_files": extracted}
        )


# Accept headers for which DRF's negotiation picks JSON (its first renderer) for this view.
JSON_ACCEPTS = frozenset({"", "*/*", "application/json"})


class TokenReadView(APIView):
    """A view clients poll with an API key: a plain JSON GET is answered from one raw statement,
    without DRF's request cycle (selectors.status_read_by_token); anything it cannot answer goes
    the full way, which gives every other answer, errors included."""

    reads_result = False

    def fast_answer(self, read: selectors.StatusRead) -> dict[str, Any] | None:
        """The body for this read, or None to let the full path answer."""
        raise NotImplementedError

    def dispatch(self, request, *args, **kwargs):
        if request.method == "GET" and not request.META.get("QUERY_STRING"):
            accept = request.headers.get("Accept", "")
            key = parse_token_header(request.headers.get("Authorization", ""))
            if accept in JSON_ACCEPTS and key is not None:
                try:
                    read = selectors.status_read_by_token(key, kwargs["request_id"], with_result=self.reads_result)
                except Exception as exc:
                    if not is_unavailable(exc):
                        raise
                    read = None  # the full path answers 503 in the API's envelope
                body = self.fast_answer(read) if read is not None else None
                if body is not None:
                    content = JSONRenderer().render(body)
                    return HttpResponse(content, content_type="application/json", headers=self.default_response_headers)
        return super().dispatch(request, *args, **kwargs)


class JobDetailView(TokenReadView):
    @extend_schema(responses=RunStatusOutput)
    def get(self, request, request_id):
        return Response(RunStatusOutput(selectors.run_for(request.user, request_id)).data)

    def fast_answer(self, read: selectors.StatusRead) -> dict[str, Any] | None:
        return status_payload(read)


class PendingInteractionView(APIView):
    @extend_schema(responses=PendingOutput)
    def get(self, request, request_id):
        run = selectors.run_for(request.user, request_id)
        if run.execution_mode != "interactive":
            raise ApplicationError("RUN_NOT_INTERACTIVE", "this run is not interactive")
        return Response({"request_id": str(run.pk), "status": run.status, "pending": selectors.pending_payload(run)})


class ReplyView(APIView):
    @extend_schema(request=ReplyInput, responses=StateChangeOutput)
    def post(self, request, request_id):
        # The body is parsed only once the reply is within the rate and the run visible.
        run = replies.receive_reply(request.user, request_id, lambda _run: replies.SentReply(request.data))
        return Response({"request_id": str(run.pk), "status": run.status, "accepted": True})


class InteractionHistoryView(APIView):
    @extend_schema(
        responses=inline_serializer(
            "InteractionHistory", {"request_id": serializers.UUIDField(), "interactions": InteractionRecord(many=True)}
        )
    )
    def get(self, request, request_id):
        run = selectors.run_for(request.user, request_id)
        history = InteractionRecord(selectors.interaction_history(run), many=True).data
        return Response({"request_id": str(run.pk), "interactions": history})


class CancelView(APIView):
    @extend_schema(request=None, responses=CancelOutput)
    def post(self, request, request_id):
        run, accepted = services.cancel_run(selectors.run_for(request.user, request_id))
        message = "the run was canceled" if accepted else f"the run had already ended ({run.status})"
        return Response(
            {
                "request_id": str(run.pk),
                "run_id": str(run.pk),
                "status": run.status,
                "accepted": accepted,
                "message": message,
            }
        )


def terminal(run):
    """`run`, once it has ended (409 RESULT_NOT_READY before)."""
    if not run.is_terminal:
        raise Conflict(
            "RESULT_NOT_READY", f"the run is {run.status}; its result exists once it ends", status=run.status
        )
    return run


class ResultView(TokenReadView):
    reads_result = True

    @extend_schema(responses=ResultOutput)
    def get(self, request, request_id):
        run = terminal(selectors.run_for(request.user, request_id))
        return Response(_result_body(run))

    def fast_answer(self, read: selectors.StatusRead) -> dict[str, Any] | None:
        return _result_body(read.run) if read.run.is_terminal else None  # 409 from the full path


def _result_body(run: Run) -> dict[str, Any]:
    return {"request_id": str(run.pk), "result": run.result}


class ArtifactListView(APIView):
    @extend_schema(
        responses=inline_serializer(
            "ArtifactList",
            {"request_id": serializers.UUIDField(), "artifacts": serializers.ListField(child=serializers.CharField())},
        )
    )
    def get(self, request, request_id):
        run = selectors.with_files(selectors.run_for(request.user, request_id))
        return Response({"request_id": str(run.pk), "artifacts": list_artifacts(run.run_dir)})


class ArtifactFileView(APIView):
    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request, request_id, path):
        run = selectors.with_files(selectors.run_for(request.user, request_id))
        return FileResponse(served_artifact(run, path), as_attachment=True, filename=path.rsplit("/", 1)[-1])


class BundleView(APIView):
    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    def get(self, request, request_id):
        run = selectors.with_files(terminal(selectors.run_for(request.user, request_id)))
        bundle, found = bundle_path(run, configured_secrets())
        services.record_keys_in_output(run.pk, run.attempt_number, found)
        return FileResponse(
            open(bundle, "rb"), as_attachment=True, filename="run_bundle.zip", content_type="application/zip"
        )


def _log_query(request, sizes: dict[int, dict[str, int]]) -> tuple[int | None, str | None]:
    """The attempt (`?attempt=N`, else the latest) and the stream (`?stream=`, else None: JSON)."""
    raw_attempt, stream = request.query_params.get("attempt"), request.query_params.get("stream")
    if stream is not None and stream not in selectors.LOG_STREAMS:
        raise ApplicationError("INVALID_LOG_STREAM", f"stream must be one of {', '.join(selectors.LOG_STREAMS)}")
    if raw_attempt is None:
        attempt = max(sizes, default=None)
        if attempt is None and stream is not None:
            raise NotFound("ATTEMPT_NOT_FOUND", "the run has no logs yet")
        return attempt, stream
    if not (raw_attempt.isascii() and raw_attempt.isdigit() and len(raw_attempt) <= 9 and int(raw_attempt) > 0):
        raise ApplicationError("INVALID_ATTEMPT", "attempt must be a positive integer")
    if int(raw_attempt) not in sizes:
        raise NotFound("ATTEMPT_NOT_FOUND", f"the run has no logs of attempt {int(raw_attempt)}")
    return int(raw_attempt), stream


def _log_stream(request, path, size: int):
    """The whole log as text/plain, read a chunk at a time; a `Range: bytes=…` header gets its part (206)."""
    try:
        part = requested_range(request.headers.get("Range"), size)
    except RangeNotSatisfiable:
        return Response(
            {"detail": {"code": "RANGE_NOT_SATISFIABLE", "message": f"the log holds {size} bytes"}},
            status=416,
            headers={"Content-Range": f"bytes */{size}"},
        )
    start, end = part or (0, size)
    handle: BinaryIO
    try:
        handle = open(path, "rb")
    except FileNotFoundError:  # an attempt may leave one stream unwritten
        start = end = 0
        handle = io.BytesIO()
    response = StreamingHttpResponse(
        file_chunks(handle, start, end), content_type="text/plain; charset=utf-8", status=206 if part else 200
    )
    response["Content-Length"] = str(end - start)
    response["Accept-Ranges"] = "bytes"
    if part:
        response["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    return response


class LogsView(APIView):
    # A stream's answer is text/plain: DRF renders only the JSON index and errors, whatever the client accepts.
    content_negotiation_class = JsonWhateverTheClientAccepts

    @extend_schema(
        parameters=[
            OpenApiParameter("attempt", int, description="the attempt to show (default: the latest)"),
            OpenApiParameter(
                "stream",
                str,
                enum=list(selectors.LOG_STREAMS),
                description="answer the whole of this log as text/plain instead of JSON (supports `Range`)",
            ),
            OpenApiParameter("Range", str, OpenApiParameter.HEADER, description="with `stream`: `bytes=start-end`"),
        ],
        responses={
            (200, "application/json"): LogsOutput,
            (200, "text/plain"): OpenApiTypes.STR,
            (206, "text/plain"): OpenApiTypes.STR,
        },
    )
    def get(self, request, request_id):
        run = selectors.with_files(selectors.run_for(request.user, request_id))
        sizes = selectors.log_sizes(run)
        attempt, stream = _log_query(request, sizes)
        if stream is not None:
            assert attempt is not None  # _log_query answers 404 otherwise
            return _log_stream(request, selectors.log_path(run, attempt, stream), sizes[attempt][stream])
        shown = sizes.get(attempt, {}) if attempt is not None else {}
        cap = settings.SKILLRUNNER_LOG_TEXT_MAX_BYTES
        answer: dict[str, Any] = {"request_id": run.pk, "attempt_number": attempt}
        for name in selectors.LOG_STREAMS:
            size = shown.get(name, 0)
            path = selectors.log_path(run, attempt, name) if attempt is not None and size else None
            answer[name] = selectors.log_head(path, cap) if path else ""
            answer[f"{name}_bytes"] = size
            answer[f"{name}_truncated"] = size > cap
        answer["attempts"] = [
            {"attempt_number": number, **{f"{name}_bytes": size for name, size in streams.items()}}
            for number, streams in sizes.items()
        ]
        return Response(LogsOutput(answer).data)


def requested_after_seq(request) -> int:
    """The cursor of a request for a run's events: `after_seq`, else an EventSource's `Last-Event-ID`."""
    raw = request.query_params.get("after_seq") or request.headers.get("Last-Event-ID") or "0"
    if not (raw.isascii() and raw.isdigit()):
        raise ApplicationError("INVALID_CURSOR", "after_seq must be a non-negative integer")
    return int(raw)


EventHistory = inline_serializer(
    "EventHistory",
    {"request_id": serializers.UUIDField(), "events": EventRecord(many=True), "last_seq": serializers.IntegerField()},
)


class EventHistoryView(APIView):
    @extend_schema(parameters=[OpenApiParameter("after_seq", int)], responses=EventHistory)
    def get(self, request, request_id):
        run = selectors.run_for(request.user, request_id)
        events = selectors.events_after(run, requested_after_seq(request))
        return Response(
            {
                "request_id": str(run.pk),
                "events": EventRecord(events, many=True).data,
                "last_seq": events[-1].seq if events else requested_after_seq(request),
            }
        )


class UsageView(APIView):
    """GET /v1/usage (R-AC4): token, cost and duration totals of the caller's turns, grouped."""

    @extend_schema(parameters=[UsageQuery], responses=UsageOutput)
    def get(self, request):
        query = UsageQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        since, until, group_by = (query.validated_data.get(key) for key in ("since", "until", "group_by"))
        turns = selectors.usage_visible_to(request.user)
        if since is not None:
            turns = turns.filter(created_at__gte=since)
        if until is not None:
            turns = turns.filter(created_at__lt=until)
        return Response(
            UsageOutput(
                {"group_by": group_by, "since": since, "until": until, "groups": aggregate(turns, group_by)}
            ).data
        )
