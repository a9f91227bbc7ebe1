"""Liveness, readiness and the engine catalogue."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_safe
from django_q.status import Stat
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from engines.registry import ENGINE_NAMES, get_adapter
from runs.engine_settings import engine_config
from skillrunner.errors import NotFound

PROBE_HOME = "_probe"


@require_safe
def ping(request) -> HttpResponse:
    """Liveness without touching the database; open, like every probe endpoint."""
    return HttpResponse(status=204)


@require_safe
def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request) -> JsonResponse:
    """Ready when the database answers and a worker cluster reported in recently."""
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means not ready
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        fresh = [s for s in Stat.get_all() if s.timestamp and s.timestamp > timezone.now() - timedelta(seconds=30)]
        checks["worker"] = "ok" if fresh else "no recent worker heartbeat"
    except Exception as exc:
        checks["worker"] = f"error: {type(exc).__name__}"
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ready" if ready else "not_ready", "checks": checks}, status=200 if ready else 503)


def _engine_entry(name: str) -> dict:
    adapter = get_adapter(name)
    config = engine_config(name, PROBE_HOME)
    version = adapter.detect_version(config)
    return {
        "engine": name,
        "cli_version_detected": version,
        "available": version is not None,
        "binary": config.binary,
        "interactive_profile": adapter.interactive_profile,
        "default_model": config.default_model,
    }


class EngineListView(APIView):
    @extend_schema(responses=dict)
    def get(self, request):
        return Response({"engines": [_engine_entry(name) for name in ENGINE_NAMES]})


class EngineModelsView(APIView):
    @extend_schema(responses=dict)
    def get(self, request, engine):
        if engine not in ENGINE_NAMES:
            raise NotFound("ENGINE_NOT_FOUND", f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
        adapter = get_adapter(engine)
        config = engine_config(engine, PROBE_HOME)
        return Response(
            {"engine": engine, "cli_version_detected": adapter.detect_version(config), "models": adapter.models(config)}
        )
