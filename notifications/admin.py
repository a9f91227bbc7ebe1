"""Admin of webhooks (R-NT1): endpoints (deletable, secrets never shown) and the delivery log
with its attempts, filters and a "redeliver" action; and the question emails' outbox (R-NT3)."""

from __future__ import annotations

from django.contrib import admin, messages

from kernel.readonly_admin import ReadOnlyAdmin, ReadOnlyInline

from . import services
from .models import QuestionEmail, WebhookAttempt, WebhookDelivery, WebhookEndpoint

ENDPOINT_FIELDS = ("id", "owner", "url", "events", "run", "created_at")


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyAdmin):
    list_display = ("url", "owner", "events", "run", "created_at")
    list_select_related = ("owner",)
    list_filter = ("created_at", ("run", admin.EmptyFieldListFilter))
    search_fields = ("url", "owner__username", "run__request_id")
    fields = ENDPOINT_FIELDS

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        return self.shown(ENDPOINT_FIELDS)  # not the secret: it signs, it is never displayed

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.has_perm("notifications.delete_webhookendpoint")


class WebhookAttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = ("number", "started_at", "status_code", "duration_ms", "error")
    show_change_link = False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "delivery_id",
        "event",
        "endpoint",
        "state",
        "attempt_count",
        "last_status_code",
        "created_at",
        "next_attempt_at",
        "delivered_at",
    )
    list_select_related = ("endpoint",)
    list_filter = ("state", "event", "last_status_code", "created_at")
    search_fields = ("delivery_id", "run__request_id", "endpoint__url", "endpoint__owner__username")
    date_hierarchy = "created_at"
    show_full_result_count = False
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    def has_redeliver_permission(self, request) -> bool:
        return request.user.has_perm("notifications.change_webhookdelivery")

    @admin.action(description="Redeliver selected deliveries (same delivery id)", permissions=["redeliver"])
    def redeliver(self, request, queryset):
        count = services.redeliver(queryset)
        self.message_user(request, f"{count} deliveries queued to be sent again.", messages.SUCCESS)


@admin.register(QuestionEmail)
class QuestionEmailAdmin(ReadOnlyAdmin):
    list_display = ("interaction", "state", "attempt_count", "created_at", "next_attempt_at", "sent_at")
    list_select_related = ("interaction",)
    list_filter = ("state", "created_at")
    search_fields = ("interaction__run__request_id", "interaction__run__owner__username")
    date_hierarchy = "created_at"
    show_full_result_count = False
