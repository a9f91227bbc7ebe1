"""Login with throttled failures (R-FS1): after SKILLRUNNER_LOGIN_MAX_FAILURES failed attempts
within SKILLRUNNER_LOGIN_WINDOW_SECONDS, from one address or for one username, further attempts
are refused with 429 until the window ends. Successful logins cost nothing."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse


def failure_keys(address: str, username: str) -> list[str]:
    """The counters a password attempt from `address` for `username` adds to; shared by the login
    form and HTTP Basic (accounts.authentication), so neither is a way around the other's limit."""
    user_digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    return [f"login_failures_ip_{address}", f"login_failures_user_{user_digest}"]


def _failure_keys(request) -> list[str]:
    return failure_keys(request.META.get("REMOTE_ADDR", ""), request.POST.get("username", ""))


def too_many_failures(keys: list[str]) -> bool:
    counts = cache.get_many(keys)
    return any(count >= settings.SKILLRUNNER_LOGIN_MAX_FAILURES for count in counts.values())


def count_failure(keys: list[str]) -> None:
    for key in keys:
        cache.add(key, 0, timeout=settings.SKILLRUNNER_LOGIN_WINDOW_SECONDS)  # the window starts here
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=settings.SKILLRUNNER_LOGIN_WINDOW_SECONDS)


class LoginView(auth_views.LoginView):
    def post(self, request, *args, **kwargs) -> HttpResponse:
        keys = _failure_keys(request)
        if too_many_failures(keys):
            form = self.get_form()
            form.add_error(
                None,
                ValidationError(
                    "Too many failed logins; try again in a few minutes. (RATE_LIMITED)", code="RATE_LIMITED"
                ),
            )
            return self.render_to_response(self.get_context_data(form=form), status=429)
        response = super().post(request, *args, **kwargs)
        if not request.user.is_authenticated:
            count_failure(keys)
        return response


def admin_login(request) -> HttpResponseRedirect:
    """Django admin's own login form counts no failures: it would be a way around the limit, so
    it sends people to the one login page, keeping where they were going (the admin by default)."""
    return auth_views.redirect_to_login(request.GET.get("next") or reverse("admin:index"))
