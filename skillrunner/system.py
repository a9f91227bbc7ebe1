"""Liveness and readiness probes."""

from __future__ import annotations

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from enginehost.config import SANDBOX_OFF, sandbox_check
from runs.supervision import a_recovered_worker_is_alive


@require_safe
def ping(request) -> HttpResponse:
    """Liveness without touching the database; open, like every probe endpoint."""
    return HttpResponse(status=204)


@require_safe
def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request) -> JsonResponse:
    """Ready when the database answers, a worker that lives now has finished its start-up
    recovery (R-OP7, R-LC13) and engine turns can be sandboxed (or the sandbox is off, R-SB6)."""
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means not ready
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        ready_worker = a_recovered_worker_is_alive()
        checks["worker"] = "ok" if ready_worker else "no live worker has finished its start-up recovery"
    except Exception as exc:
        checks["worker"] = f"error: {type(exc).__name__}"
    checks["sandbox"] = sandbox_check()
    ready = all(value in ("ok", SANDBOX_OFF) for value in checks.values())
    return JsonResponse({"status": "ready" if ready else "not_ready", "checks": checks}, status=200 if ready else 503)
