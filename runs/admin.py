"""Admin audit of runs (R-UI4): read-only history with filters, search and inline conversations."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.template.defaultfilters import truncatechars

from skillrunner.readonly_admin import ReadOnlyAdmin, ReadOnlyInline

from .models import Interaction, Run, RunEvent

SHORT_TEXT = 80
# The fields an auditor reads first; everything else (worker bookkeeping) is folded away below.
RUN_FIELDSETS = [
    (
        None,
        {
            "fields": [
                "request_id",
                "owner",
                "skill",
                "skill_version",
                "engine",
                "model",
                "execution_mode",
                "interactive_profile",
                "status",
            ]
        },
    ),
    ("Request", {"fields": ["input", "parameter", "runtime_options"]}),
    (
        "Conversation",
        {
            "fields": [
                "attempt_number",
                "pending_interaction_id",
                "interaction_count",
                "auto_decision_count",
                "wait_deadline_at",
                "recovery_state",
            ]
        },
    ),
    ("Outcome", {"fields": ["error", "warnings", "result"]}),
    ("Times", {"fields": ["created_at", "started_at", "updated_at", "finished_at"]}),
]


class InteractionInline(ReadOnlyInline):
    model = Interaction
    fields = (
        "interaction_id",
        "attempt_number",
        "kind",
        "prompt",
        "response",
        "resolution_mode",
        "answered_by",
        "asked_at",
        "answered_at",
    )

    def get_queryset(self, request) -> QuerySet[Interaction]:
        return super().get_queryset(request).select_related("run", "answered_by")


class RunEventInline(ReadOnlyInline):
    model = RunEvent
    fields = ("seq", "kind", "payload", "created_at")
    show_change_link = False

    def get_queryset(self, request) -> QuerySet[RunEvent]:
        return super().get_queryset(request).select_related("run")


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "request_id",
        "skill",
        "owner",
        "engine",
        "execution_mode",
        "status",
        "attempt_number",
        "interaction_count",
        "created_at",
    )
    list_select_related = ("skill", "owner")
    list_filter = (
        "status",
        "engine",
        "skill",
        "execution_mode",
        "interactive_profile",
        "interactions__resolution_mode",
        "created_at",
    )
    search_fields = ("request_id", "owner__username", "interactions__prompt", "interactions__response")
    date_hierarchy = "created_at"
    show_full_result_count = False
    inlines = [InteractionInline, RunEventInline]

    def get_fieldsets(self, request, obj=None):
        shown = {name for _, options in RUN_FIELDSETS for name in options["fields"]}
        rest = [name for name in self.get_readonly_fields(request, obj) if name not in shown]
        return [*RUN_FIELDSETS, ("Worker", {"fields": rest, "classes": ["collapse"]})]


@admin.register(Interaction)
class InteractionAdmin(ReadOnlyAdmin):
    list_display = (
        "run",
        "interaction_id",
        "kind",
        "short_prompt",
        "short_response",
        "resolution_mode",
        "answered_by",
        "asked_at",
        "answered_at",
    )
    list_select_related = ("run", "answered_by")
    list_filter = ("resolution_mode", "kind", "run__engine", "run__skill", "asked_at")
    search_fields = ("run__request_id", "run__owner__username", "prompt", "response")
    show_full_result_count = False

    @admin.display(description="prompt")
    def short_prompt(self, interaction: Interaction) -> str:
        return truncatechars(interaction.prompt, SHORT_TEXT)

    @admin.display(description="response")
    def short_response(self, interaction: Interaction) -> str:
        return "—" if interaction.response is None else truncatechars(str(interaction.response), SHORT_TEXT)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "kind", "created_at")
    list_select_related = ("run",)
    list_filter = ("kind", "created_at")
    search_fields = ("run__request_id", "kind")
    show_full_result_count = False


from .notifications import admin as notifications_admin  # noqa: E402,F401  (registers the webhook admin)
