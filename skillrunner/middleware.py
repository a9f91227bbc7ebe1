"""Refuses oversized request bodies up front with 413, before anything reads them."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        multipart = request.content_type == "multipart/form-data"
        limit = settings.SKILLRUNNER_MAX_UPLOAD_BYTES if multipart else settings.SKILLRUNNER_MAX_JSON_BODY_BYTES
        if length > limit:
            return JsonResponse(
                {
                    "detail": {
                        "code": "REQUEST_TOO_LARGE",
                        "message": f"request body of {length} bytes exceeds the limit of {limit}",
                    }
                },
                status=413,
            )
        return self.get_response(request)
