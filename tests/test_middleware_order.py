"""The middleware chain's order is part of the request path's cost (issue #16): under ASGI Django
runs the chain in one thread only when the innermost middleware is sync-only; with an
async-capable one there, each Django middleware above whitenoise hops to a thread and back per
hook. And the body-size guard must still answer before any view reads a body."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string


def test_the_innermost_middleware_is_sync_only():
    innermost = import_string(settings.MIDDLEWARE[-1])
    assert getattr(innermost, "sync_capable", True)
    assert not getattr(innermost, "async_capable", False)


def test_the_body_size_guard_runs_before_every_view():
    assert settings.MIDDLEWARE[-1] == "skillrunner.middleware.RequestSizeLimitMiddleware"
