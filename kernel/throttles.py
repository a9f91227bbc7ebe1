"""Rate limits shared by the REST API, the run socket and the browser forms, so no transport
bypasses another (R-FS1)."""

from __future__ import annotations

from types import SimpleNamespace

from django import forms
from rest_framework.exceptions import Throttled
from rest_framework.throttling import ScopedRateThrottle

REPLY_SCOPE = "interaction_reply"
RUN_CREATE_SCOPE = "run_create"
SKILL_INSTALL_SCOPE = "skill_install"
SETTINGS_SCOPE = "settings_change"


def check_rate(user, scope: str) -> None:
    """Count one request of `user` in `scope`; raises Throttled (429) past the configured rate."""
    throttle = ScopedRateThrottle()
    # Only the attributes ScopedRateThrottle reads, outside a request/view (websocket replies).
    request, view = SimpleNamespace(user=user, META={}), SimpleNamespace(throttle_scope=scope)
    if not throttle.allow_request(request, view):  # type: ignore[arg-type]
        raise Throttled(wait=throttle.wait())


def form_over_rate(form: forms.Form, user, scope: str) -> bool:
    """Count one submission of a browser form against the API's limit in `scope`; past it, the
    form carries the API's error (RATE_LIMITED) and the page answers 429."""
    try:
        check_rate(user, scope)
    except Throttled as exc:
        form.add_error(None, f"{exc.detail} (RATE_LIMITED)")
        return True
    return False
