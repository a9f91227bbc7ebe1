"""The middleware chain's order is part of the request path's cost (issue #16): under ASGI Django
runs the chain in one thread only when the innermost middleware is sync-only; with an
async-capable one there, each Django middleware above whitenoise hops to a thread and back per
hook. The body-size guard is that innermost middleware, and still answers before any view reads
a body (tests/security/test_limits.py)."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string


def test_the_innermost_middleware_is_the_sync_only_body_size_guard():
    assert settings.MIDDLEWARE[-1] == "skillrunner.middleware.RequestSizeLimitMiddleware"
    innermost = import_string(settings.MIDDLEWARE[-1])
    assert getattr(innermost, "sync_capable", True)
    assert not getattr(innermost, "async_capable", False)
