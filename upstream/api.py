"""Thin views of upstream's paths that the service's own API does not have (SPEC §16)."""

from __future__ import annotations

from django.http import HttpResponseRedirect
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import BasicChallenge
from runs.models import Run
from skillrunner.errors import ApplicationError

from .handshake import handshake

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


def ui(request) -> HttpResponseRedirect:
    """`<base>/ui`, which upstream's client opens for its management dialog: the run list."""
    return HttpResponseRedirect(reverse("ui:run-list"))
