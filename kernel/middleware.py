"""Request-level guards: oversized bodies refused with 413; errors under /v1/ always JSON; a
Content-Security-Policy on every response.

The size check reads Content-Length before Django parses or stores any of the body. It cannot
stop the body from arriving: daphne (Twisted) has no body limit and receives the whole request
before the application sees it, so a reverse proxy in front must cap bodies where that matters."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve

from .errors import ApplicationError


def error_response(status: int, code: str, message: str) -> JsonResponse:
    """An error in the API's envelope from a middleware, which answers before DRF's handler can."""
    return JsonResponse({"detail": ApplicationError(code, message).as_detail()}, status=status)


def oversized_body(request) -> ApplicationError | None:
    """413 REQUEST_TOO_LARGE for a body announced over its limit, else None."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    # From the header: Django's request and DRF's both have META, not the same `content_type`.
    multipart = request.META.get("CONTENT_TYPE", "").partition(";")[0].strip().lower() == "multipart/form-data"
    limit = settings.SKILLRUNNER_MAX_UPLOAD_BYTES if multipart else settings.SKILLRUNNER_MAX_JSON_BODY_BYTES
    if length <= limit:
        return None
    return ApplicationError(
        "REQUEST_TOO_LARGE", f"request body of {length} bytes exceeds the limit of {limit}", status_code=413
    )


class RequestSizeLimitMiddleware:
    """413 REQUEST_TOO_LARGE for an announced body over the limit (a chunked body, which has no
    Content-Length, is left to the limits of the parsers that read it). A view class that sets
    `answers_oversized_body` gets the request instead, to refuse it itself (an upload's run ends
    with the refusal, R-UP8) without reading the body."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        refused = oversized_body(request)
        if refused is None or _answers_oversized_body(request):
            return self.get_response(request)
        return error_response(refused.status_code, refused.code, refused.message)


def _answers_oversized_body(request) -> bool:
    try:
        view = resolve(request.path_info).func
    except Resolver404:
        return False
    return getattr(getattr(view, "view_class", None), "answers_oversized_body", False)


API_PREFIX = "/v1/"
# Errors Django answers by itself (no route matched, a plain view's method check, an uncaught
# exception), rendered in the API's envelope for clients of /v1/ (R-OP8).
API_ERROR_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 500: "INTERNAL_ERROR"}


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        code = API_ERROR_CODES.get(response.status_code)
        if code is None or not request.path.startswith(API_PREFIX) or _is_json(response):
            return response
        if response.status_code == 404:
            message = f"no endpoint {request.method} {request.path}"
        elif response.status_code == 405:
            message = f"method {request.method} is not allowed on {request.path}"
        else:
            message = "the server failed to answer this request"
        json_response = error_response(response.status_code, code, message)
        if response.has_header("Allow"):
            json_response["Allow"] = response["Allow"]
        return json_response


class PageMethodNotAllowedMiddleware:
    """A page's 405 (a form's address opened, reloaded or come back to) as a page of the site
    with ways on, instead of the empty answer browsers show as their own error. After the
    authentication middleware: the page shows who is logged in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != 405 or request.path.startswith(API_PREFIX) or response.content:
            return response
        page = render(request, "405.html", {"allowed": response.get("Allow", "POST")}, status=405)
        page["Allow"] = response.get("Allow", "")
        return page


def _is_json(response) -> bool:
    return response.get("Content-Type", "").split(";")[0].strip() == "application/json"


# Scripts only from our own static files, never inline (R-FS3): text an agent or a skill package
# wrote cannot run even if some template forgot to escape it. Inline styles stay allowed (the
# API docs page has a <style> block); they cannot run code.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response
