"""Liveness and readiness probes."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_safe
from django_q.status import Stat


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
