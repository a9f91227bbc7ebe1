"""Rate limits shared by the REST API, the run socket and the browser forms, so no transport
bypasses another (R-FS1)."""

from __future__ import annotations

from types import SimpleNamespace

from rest_framework.exceptions import Throttled
from rest_framework.throttling import ScopedRateThrottle

REPLY_SCOPE = "interaction_reply"
RUN_CREATE_SCOPE = "run_create"


def check_rate(user, scope: str) -> None:
    """Count one request of `user` in `scope`; raises Throttled (429) past the configured rate."""
    throttle = ScopedRateThrottle()
    # Only the attributes ScopedRateThrottle reads, outside a request/view (websocket replies).
    request, view = SimpleNamespace(user=user, META={}), SimpleNamespace(throttle_scope=scope)
    if not throttle.allow_request(request, view):  # type: ignore[arg-type]
        raise Throttled(wait=throttle.wait())
