"""The settings page: accounts' own sections (notification preferences, API tokens) and those
higher apps register (`settings_sections`), so that accounts imports none of them. A registered
section is shown between accounts' two, in the order the apps are installed.

The page's POST views, accounts' and a section's, answer with `render_page` (the page with their
bound form's errors), `redirect_showing_once` (something made, then back to the page, which shows
it once; `make_from_form` does both for a form that makes something) or `one_click_change` (a
change, then back to the page): every change ends in a redirect, so reloading the page or going
Back never repeats it (post/redirect/get)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from rest_framework.exceptions import Throttled

from kernel.api_errors import exception_handler
from kernel.errors import ApplicationError, NotFound
from kernel.throttles import SETTINGS_SCOPE, check_rate, form_over_rate

from .forms import NotificationSettingsForm, TokenForm
from .services import email_questions_enabled, tokens_of
from .settings_sections import registered

# What a POST made, for the page the redirect after it shows: in the server-side session until
# that page is rendered, which takes it out (a new token's key is shown once, as before, and is
# never in a cookie, a URL or the browser's history).
SHOW_ONCE_KEY = "settings_show_once"


def redirect_showing_once(request: HttpRequest, anchor: str, **once: Any) -> HttpResponse:
    """Back to the page at `#anchor` after a POST made something; the page shows `once` (JSON
    values by the names the templates use) the next time it is rendered, then never again."""
    request.session[SHOW_ONCE_KEY] = once
    return redirect(f"{reverse('account-settings')}#{anchor}")


def render_page(request: HttpRequest, status: int = 200, **shown: Any) -> HttpResponse:
    user = cast(User, request.user)  # login_required
    shown = {**request.session.pop(SHOW_ONCE_KEY, {}), **shown}
    sections = registered()
    new_token_id = shown.get("new_token_id")
    tokens = list(tokens_of(user))
    context = {
        **shown,
        "new_token": next((token for token in tokens if token.pk == new_token_id), None),
        "form": shown.get("form")
        or NotificationSettingsForm(initial={"email": user.email, "email_questions": email_questions_enabled(user)}),
        "token_form": shown.get("token_form") or TokenForm(),
        # Revoked and expired tokens open nothing any more: the page folds them away.
        "tokens": [token for token in tokens if token.is_active],
        "ended_tokens": [token for token in tokens if not token.is_active],
        "sections": sections,
    }
    for section in sections:
        context.update(section.context_for(user, shown))
    return render(request, "accounts/settings.html", context, status=status)


def make_from_form(
    request: HttpRequest,
    form: forms.Form,
    *,
    shown_as: str,
    error_field: str,
    anchor: str,
    make: Callable[[dict[str, Any]], dict[str, Any]],
) -> HttpResponse:
    """A form that makes something: `make` gets its cleaned data and returns what the page shows
    once, at `#anchor`. An invalid form (400), the settings limit (429) or the service's refusal
    (its status, its coded message on `error_field`) give the page again with the form, named
    `shown_as` in the templates, keeping what was typed."""
    if not form.is_valid():
        return render_page(request, 400, **{shown_as: form})
    if form_over_rate(form, request.user, SETTINGS_SCOPE):
        return render_page(request, 429, **{shown_as: form})
    try:
        once = make(form.cleaned_data)
    except ApplicationError as exc:
        for message in exc.messages():
            form.add_error(error_field, message)
        return render_page(request, exc.status_code, **{shown_as: form})
    return redirect_showing_once(request, anchor, **once)


def over_rate(request: HttpRequest) -> HttpResponse | None:
    """One settings change counted; past the limit, back to the page with the API's error."""
    try:
        check_rate(request.user, SETTINGS_SCOPE)
    except Throttled as exc:
        messages.error(request, "{message} ({code})".format(**exception_handler(exc, {}).data["detail"]))
        return redirect("account-settings")
    return None


def one_click_change(request: HttpRequest, change: Callable[[], object], done: str) -> HttpResponse:
    """A one-click change (delete, revoke, redeliver) of something of the user's: back to the page."""
    if refused := over_rate(request):
        return refused
    try:
        change()
    except NotFound:
        raise Http404("not yours or not there") from None
    messages.success(request, done)
    return redirect("account-settings")
