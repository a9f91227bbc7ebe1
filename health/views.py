"""Liveness and readiness probes."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from . import readiness


@require_safe
def ping(request) -> HttpResponse:
    """Liveness without touching the database; open, like every probe endpoint."""
    return HttpResponse(status=204)


@require_safe
def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request) -> JsonResponse:
    """Ready when the database answers and every check the apps registered passes
    (health.readiness): a live worker that finished its start-up recovery (R-OP7, R-LC13),
    engine turns that can be sandboxed or a sandbox switched off (R-SB6)."""
    ready, checks = readiness.check_all()
    return JsonResponse({"status": "ready" if ready else "not_ready", "checks": checks}, status=200 if ready else 503)
