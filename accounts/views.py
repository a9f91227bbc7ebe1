"""The settings page: a user's email address and notification opt-out (R-NT3)."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from skillrunner.throttles import SETTINGS_SCOPE, form_over_rate

from .forms import NotificationSettingsForm
from .services import email_questions_enabled, update_notification_settings


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    user = cast(User, request.user)  # login_required
    initial = {"email": user.email, "email_questions": email_questions_enabled(user)}
    form = NotificationSettingsForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        if form_over_rate(form, user, SETTINGS_SCOPE):
            return render(request, "accounts/settings.html", {"form": form}, status=429)
        update_notification_settings(request.user, **form.cleaned_data)
        messages.success(request, "Settings saved.")
        return redirect("account-settings")
    return render(request, "accounts/settings.html", {"form": form})
