"""One error envelope for the whole API (SPEC §8): coded errors carry {code, message}."""

from __future__ import annotations

import logging
import sys

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DataError, InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .errors import ApplicationError

logger = logging.getLogger(__name__)


def _flatten(detail, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        return [
            msg
            for key, value in detail.items()
            for msg in _flatten(value, f"{prefix}{key}: " if key != "non_field_errors" else prefix)
        ]
    if isinstance(detail, list):
        return [msg for item in detail for msg in _flatten(item, prefix)]
    return [f"{prefix}{detail}"]


def is_unavailable(exc: BaseException) -> bool:
    """The database or Redis is away. redis-py is looked up rather than imported: on the embedded
    default no process loads it (a tenth of the web's start-up), and none of its errors can exist."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    redis_exceptions = sys.modules.get("redis.exceptions")
    return redis_exceptions is not None and isinstance(exc, redis_exceptions.RedisError)


# DRF's own refusals (authentication, permissions), in the envelope with a stable code; the
# WWW-Authenticate header DRF adds to a 401 is kept.
REFUSAL_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.NotAuthenticated: "NOT_AUTHENTICATED",
    exceptions.AuthenticationFailed: "NOT_AUTHENTICATED",
    exceptions.PermissionDenied: "PERMISSION_DENIED",
}


def exception_handler(exc, context):
    if is_unavailable(exc):
        # A backing service is away: the client may retry; nothing half-done is committed.
        logger.warning("backing service unavailable: %s", type(exc).__name__)
        return Response(
            {"detail": {"code": "SERVICE_UNAVAILABLE", "message": "a backing service is unavailable; retry shortly"}},
            status=503,
        )
    if isinstance(exc, DataError):
        # e.g. PostgreSQL refuses NUL characters and unpaired surrogates in text.
        return Response(
            {"detail": {"code": "UNSTORABLE_INPUT", "message": "the request holds characters that cannot be stored"}},
            status=400,
        )
    if isinstance(exc, ApplicationError):
        return Response({"detail": exc.as_detail()}, status=exc.status_code)
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail)
        return Response(
            {"detail": {"code": "VALIDATION_ERROR", "message": "; ".join(errors), "errors": errors}},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, exceptions.ParseError):
        return Response({"detail": {"code": "MALFORMED_REQUEST", "message": str(exc.detail)}}, status=400)
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return Response({"detail": {"code": "UNSUPPORTED_MEDIA_TYPE", "message": str(exc.detail)}}, status=415)
    if isinstance(exc, exceptions.Throttled):
        response = drf_exception_handler(exc, context)
        assert response is not None  # DRF answers every APIException
        wait = exc.wait  # type: ignore[attr-defined]  # set by Throttled.__init__; the stubs omit it
        response.data = {"detail": {"code": "RATE_LIMITED", "message": str(exc.detail), "retry_after": wait}}
        return response
    if isinstance(exc, exceptions.MethodNotAllowed):
        return Response({"detail": {"code": "METHOD_NOT_ALLOWED", "message": str(exc.detail)}}, status=405)
    if isinstance(exc, (Http404, exceptions.NotFound)):
        return Response({"detail": {"code": "NOT_FOUND", "message": "Not found."}}, status=404)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    code = next((code for kind, code in REFUSAL_CODES.items() if isinstance(exc, kind)), None)
    if response is not None and code is not None:
        response.data = {"detail": {"code": code, "message": str(exc.detail)}}
    return response
