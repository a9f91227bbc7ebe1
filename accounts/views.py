"""The settings page (R-NT3, issue 30): its notification preferences and API tokens, through the
same services the API, the admin and `create_api_token` use, under the settings rate limit; the
other apps' sections come from `settings_page`.

A token's key is shown once, on the page the POST that made it redirects to (held in the
server-side session until then, never in a message, never cached)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from kernel.throttles import SETTINGS_SCOPE, form_over_rate

from .forms import NotificationSettingsForm, TokenForm
from .services import issue_token, revoke_own_token, update_notification_settings
from .settings_page import make_from_form, one_click_change, render_page


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    form = NotificationSettingsForm(request.POST) if request.method == "POST" else None
    if form is not None and form.is_valid():
        if form_over_rate(form, request.user, SETTINGS_SCOPE):
            return render_page(request, 429, form=form)
        update_notification_settings(request.user, **form.cleaned_data)
        messages.success(request, "Settings saved.")
        return redirect("account-settings")
    return render_page(request, form=form)


@login_required
@never_cache
@require_POST
def create_token(request: HttpRequest) -> HttpResponse:
    def issue(data: dict[str, Any]) -> dict[str, Any]:
        token, key = issue_token(request.user, **data)
        return {"new_token_id": token.pk, "new_key": key}

    form = TokenForm(request.POST)
    return make_from_form(request, form, shown_as="token_form", error_field="name", anchor="tokens", make=issue)


@login_required
@require_POST
def revoke_token(request: HttpRequest, token_id: str) -> HttpResponse:
    done = "Token revoked: it no longer opens the API, and its open connections closed."
    return one_click_change(request, lambda: revoke_own_token(request.user, token_id), done)
