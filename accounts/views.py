"""The settings page (R-NT3, issue 30): notifications, webhooks and API tokens, through the same
services the API, the admin and `create_api_token` use, under the settings rate limit.

A webhook's secret and a token's key are shown once, in the answer to the POST that made them
(never stored in the session or a message, never cached)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST
from rest_framework.exceptions import Throttled

from notifications import services as webhooks
from skillrunner.api_errors import exception_handler
from skillrunner.errors import ApplicationError, NotFound
from skillrunner.throttles import SETTINGS_SCOPE, check_rate, form_over_rate

from .forms import NotificationSettingsForm, WebhookForm
from .services import (
    email_questions_enabled,
    issue_token,
    revoke_own_token,
    tokens_of,
    update_notification_settings,
)

RECENT_DELIVERIES = 20


def _page(request: HttpRequest, status: int = 200, **forms: Any) -> HttpResponse:
    user = cast(User, request.user)  # login_required
    context = {
        "form": forms.pop("form", None)
        or NotificationSettingsForm(initial={"email": user.email, "email_questions": email_questions_enabled(user)}),
        "webhook_form": forms.pop("webhook_form", None) or WebhookForm(),
        "webhooks": webhooks.endpoints_of(user),
        "deliveries": webhooks.deliveries_of(user).select_related("endpoint")[:RECENT_DELIVERIES],
        "tokens": tokens_of(user),
        **forms,
    }
    return render(request, "accounts/settings.html", context, status=status)


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    form = NotificationSettingsForm(request.POST) if request.method == "POST" else None
    if form is not None and form.is_valid():
        if form_over_rate(form, request.user, SETTINGS_SCOPE):
            return _page(request, 429, form=form)
        update_notification_settings(request.user, **form.cleaned_data)
        messages.success(request, "Settings saved.")
        return redirect("account-settings")
    return _page(request, form=form)


@login_required
@never_cache
@require_POST
def add_webhook(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _page(request, 400, webhook_form=form)
    if form_over_rate(form, request.user, SETTINGS_SCOPE):
        return _page(request, 429, webhook_form=form)
    try:
        endpoint = webhooks.register_endpoint(owner=request.user, **form.cleaned_data)
    except ApplicationError as exc:
        for message in exc.messages():
            form.add_error("url", message)
        return _page(request, exc.status_code, webhook_form=form)
    return _page(request, 201, new_webhook=endpoint)


@login_required
@never_cache
@require_POST
def create_token(request: HttpRequest) -> HttpResponse:
    if refused := _over_rate(request):
        return refused
    token, key = issue_token(request.user)
    return _page(request, 201, new_token=token, new_key=key)


def _over_rate(request: HttpRequest) -> HttpResponse | None:
    """One settings change counted; past the limit, the page with the API's error and a 429."""
    try:
        check_rate(request.user, SETTINGS_SCOPE)
    except Throttled as exc:
        messages.error(request, "{message} ({code})".format(**exception_handler(exc, {}).data["detail"]))
        return redirect("account-settings")
    return None


def _change(request: HttpRequest, change, done: str) -> HttpResponse:
    """A one-click change (delete, revoke, redeliver) of something of the user's: back to the page."""
    if refused := _over_rate(request):
        return refused
    try:
        change()
    except NotFound:
        raise Http404("not yours or not there") from None
    messages.success(request, done)
    return redirect("account-settings")


@login_required
@require_POST
def delete_webhook(request: HttpRequest, webhook_id: str) -> HttpResponse:
    return _change(request, lambda: webhooks.delete_endpoint(request.user, webhook_id), "Webhook deleted.")


@login_required
@require_POST
def redeliver(request: HttpRequest, delivery_id: str) -> HttpResponse:
    done = "Delivery queued to be sent again (same delivery id)."
    return _change(request, lambda: webhooks.redeliver_own(request.user, delivery_id), done)


@login_required
@require_POST
def revoke_token(request: HttpRequest, token_id: str) -> HttpResponse:
    done = "Token revoked: it no longer opens the API, and its open connections closed."
    return _change(request, lambda: revoke_own_token(request.user, token_id), done)
