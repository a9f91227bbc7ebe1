"""The settings page's webhooks section (R-NT1, issue 30): a user's webhooks with their recent
deliveries, added, deleted and redelivered through the same services as `/v1/webhooks` and the
admin, under the settings rate limit. The page itself is accounts' (`accounts.settings_page`).

A webhook's secret is shown once, on the page the POST that added it redirects to (never in a
message, never cached)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.settings_page import make_from_form, one_click_change
from kernel.errors import NotFound

from . import services
from .forms import WebhookForm

RECENT_DELIVERIES = 20


def settings_context(user: User, shown: Mapping[str, Any]) -> dict[str, Any]:
    """The webhooks section's context (registered in `NotificationsConfig.ready`)."""
    webhooks = services.endpoints_of(user)
    new_webhook_id = shown.get("new_webhook_id")
    return {
        "webhook_form": shown.get("webhook_form") or WebhookForm(),
        "webhooks": webhooks,
        "new_webhook": webhooks.filter(pk=new_webhook_id).first() if new_webhook_id else None,
        "deliveries": services.deliveries_of(user).select_related("endpoint")[:RECENT_DELIVERIES],
    }


@login_required
@never_cache
@require_POST
def add_webhook(request: HttpRequest) -> HttpResponse:
    def register(data: dict[str, Any]) -> dict[str, Any]:
        return {"new_webhook_id": services.register_endpoint(owner=request.user, **data).pk}

    form = WebhookForm(request.POST)
    return make_from_form(request, form, shown_as="webhook_form", error_field="url", anchor="webhooks", make=register)


@login_required
@require_POST
def delete_webhook(request: HttpRequest, webhook_id: str) -> HttpResponse:
    return one_click_change(request, lambda: services.delete_endpoint(request.user, webhook_id), "Webhook deleted.")


@login_required
@require_POST
def send_test(request: HttpRequest, webhook_id: str) -> HttpResponse:
    done = "Test delivery queued; it is listed under Recent deliveries."
    return one_click_change(request, lambda: services.send_test_delivery(request.user, webhook_id), done)


@login_required
@never_cache
def delivery_detail(request: HttpRequest, delivery_id: str) -> HttpResponse:
    """A delivery as sent and answered: its body, and each attempt's headers and answer."""
    try:
        delivery = services.delivery_of(request.user, delivery_id)
    except NotFound:
        raise Http404("no such delivery") from None
    context = {
        "delivery": delivery,
        "body": services.request_body(delivery).decode(),
        "attempts": delivery.attempts.order_by("number"),
    }
    return render(request, "notifications/delivery_detail.html", context)


@login_required
@require_POST
def redeliver(request: HttpRequest, delivery_id: str) -> HttpResponse:
    done = "Delivery queued to be sent again (same delivery id)."
    return one_click_change(request, lambda: services.redeliver_own(request.user, delivery_id), done)
