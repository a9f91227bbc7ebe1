"""Admin audit of runs (R-UI4): read-only history with filters, search and inline conversations."""

from __future__ import annotations

from typing import cast

from django.conf import settings
from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.http import HttpResponse
from django.template.defaultfilters import truncatechars
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from enginehost.choice import run_model
from kernel.readonly_admin import ReadOnlyAdmin, ReadOnlyInline

from .interaction_export import as_csv, as_json, interaction_records
from .models import EventKind, Interaction, Run, RunEvent, TurnUsage

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
                "effective_model",
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
                "events",
                "wait_deadline_at",
                "recovery_state",
            ]
        },
    ),
    ("Outcome", {"fields": ["error", "warnings", "result"]}),
    ("Times", {"fields": ["created_at", "started_at", "updated_at", "finished_at"]}),
]


class ReadableAnswer:
    """An interaction's answer as people read it (a form's values one per line, a yes/no in
    words) beside the stored JSON."""

    def get_readonly_fields(self, request, obj=None):
        return [*super().get_readonly_fields(request, obj), "answer"]  # type: ignore[misc]

    @admin.display(description="answer, as read")
    def answer(self, interaction: Interaction) -> str:
        if interaction.response is None:
            return "—"
        return format_html('<p class="readable-answer" style="white-space: pre-wrap">{}</p>', interaction.answer_text)


class InteractionInline(ReadableAnswer, ReadOnlyInline):
    model = Interaction
    fields = (
        "interaction_id",
        "attempt_number",
        "kind",
        "prompt",
        "answer",
        "response",
        "resolution_mode",
        "answered_by",
        "asked_at",
        "answered_at",
    )

    def get_queryset(self, request) -> QuerySet[Interaction]:
        return super().get_queryset(request).select_related("run", "answered_by")


class RunEventInline(ReadOnlyInline):
    """The run's conversation-level events (status, questions, replies, results, warnings). Live
    activity, thousands of events for a long turn, is behind the `events` link instead."""

    model = RunEvent
    fields = ("seq", "kind", "payload", "created_at")
    show_change_link = False

    def get_queryset(self, request) -> QuerySet[RunEvent]:
        activity = (EventKind.ACTIVITY, EventKind.ACTIVITY_TRUNCATED)
        return super().get_queryset(request).exclude(kind__in=activity).select_related("run")


class TurnUsageInline(ReadOnlyInline):
    model = TurnUsage
    fields = (
        "attempt_number",
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "cost_usd",
        "duration_ms",
        "created_at",
    )


def _run_total(expression) -> Subquery:
    """A per-run total over its turns as a subquery: joins for filters and search cannot double it."""
    turns = TurnUsage.objects.filter(run=OuterRef("pk")).values("run").annotate(total=Sum(expression))
    return Subquery(turns.values("total"))


class EngineFilter(admin.SimpleListFilter):
    """The configured engines, without a DISTINCT over every run to find them."""

    title = "engine"
    parameter_name = "engine"
    field = "engine"

    def lookups(self, request, model_admin):
        return [(name, name) for name in settings.SKILLRUNNER_ENGINES]

    def queryset(self, request, queryset):
        return queryset.filter(**{self.field: self.value()}) if self.value() else queryset


class RunEngineFilter(EngineFilter):
    parameter_name = "run_engine"
    field = "run__engine"


class CappedCountPaginator(Paginator):
    """Counts at most MAX_COUNTED rows: a count of millions of events costs seconds, and nobody
    pages that far (filter by run or kind instead)."""

    MAX_COUNTED = 10_000

    @cached_property
    def count(self) -> int:
        rows = cast(QuerySet, self.object_list)  # an admin changelist pages a queryset
        return rows[: self.MAX_COUNTED].count()


class TokenUseFilter(admin.SimpleListFilter):
    """R-AC4: runs by total tokens (input + output) reported by their engine."""

    title = "token use"
    parameter_name = "tokens"
    BANDS = {
        "none": (None, None),
        "lt10k": (0, 10_000),
        "10k-100k": (10_000, 100_000),
        "gte100k": (100_000, None),
    }

    def lookups(self, request, model_admin):
        return [("none", "none reported"), ("lt10k", "< 10k"), ("10k-100k", "10k – 100k"), ("gte100k", "≥ 100k")]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None or value not in self.BANDS:
            return queryset
        if value == "none":
            return queryset.filter(total_tokens__isnull=True)
        low, high = self.BANDS[value]
        queryset = queryset.filter(total_tokens__gte=low)
        return queryset if high is None else queryset.filter(total_tokens__lt=high)


def _security_events() -> QuerySet[RunEvent]:
    """The run's security events (R-SB8, R-SB10), read from their own small index."""
    return RunEvent.objects.filter(run=OuterRef("pk"), kind=EventKind.SECURITY)


class SecurityFilter(admin.SimpleListFilter):
    """Runs whose relay refused a request or whose output held a provider key."""

    title = "security events"
    parameter_name = "security"

    def lookups(self, request, model_admin):
        return [("yes", "some"), ("no", "none")]

    def queryset(self, request, queryset):
        if self.value() not in ("yes", "no"):
            return queryset
        return queryset.filter(has_security_events=self.value() == "yes")


def _download(content: str, content_type: str, suffix: str) -> HttpResponse:
    """An export as a file to save: reading it changes nothing, so a repeated request is harmless."""
    response = HttpResponse(content, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="interaction-history.{suffix}"'
    return response


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    # Narrow columns first, usage among them: at 1280 px beside the filters, nothing scrolls away.
    list_display = (
        "run",
        "skill",
        "owner",
        "status",
        "tokens",
        "cost",
        "engine",
        "mode",
        "questions",
        "security",
        "created_at",
    )
    list_display_links = ("run",)
    list_select_related = ("skill", "owner")
    list_filter = (
        SecurityFilter,
        TokenUseFilter,
        "status",
        EngineFilter,
        "skill",
        "execution_mode",
        "interactive_profile",
        "interactions__resolution_mode",
        "created_at",
    )
    search_fields = (
        "request_id",
        "owner__username",
        "skill__skill_id",
        "skill_version__name",
        "interactions__prompt",
        "interactions__response",
    )
    search_help_text = "Searches run ids, owners' user names, skill ids and names, questions and answers."
    # No date_hierarchy: its year/month links cost a DISTINCT over every run (the created_at
    # filter serves).
    show_full_result_count = False
    list_per_page = 50
    inlines = [TurnUsageInline, InteractionInline, RunEventInline]
    actions = ["export_interactions_csv", "export_interactions_json"]

    def get_queryset(self, request) -> QuerySet[Run]:
        tokens = Coalesce("input_tokens", Value(0)) + Coalesce("output_tokens", Value(0))
        return (
            super()
            .get_queryset(request)
            .annotate(
                total_tokens=_run_total(tokens),
                total_cost=_run_total("cost_usd"),
                has_security_events=Exists(_security_events()),
            )
        )

    @admin.display(description="run", ordering="request_id")
    def run(self, run: Run) -> str:
        return str(run.pk)[:8]

    @admin.display(description="tokens", ordering="total_tokens")
    def tokens(self, run: Run) -> int | None:
        return run.total_tokens  # type: ignore[attr-defined]  # annotated by get_queryset

    @admin.display(description="cost (USD)", ordering="total_cost")
    def cost(self, run: Run) -> str:
        total = run.total_cost  # type: ignore[attr-defined]  # annotated by get_queryset
        return "—" if total is None else f"{total:.4f}"

    @admin.display(description="mode", ordering="execution_mode")
    def mode(self, run: Run) -> str:
        return run.get_execution_mode_display()

    @admin.display(description="questions", ordering="interaction_count")
    def questions(self, run: Run) -> int:
        return run.interaction_count

    @admin.display(description="security", boolean=True, ordering="has_security_events")
    def security(self, run: Run) -> bool:
        return run.has_security_events  # type: ignore[attr-defined]  # annotated by get_queryset

    @admin.display(description="model")
    def effective_model(self, run: Run) -> str:
        """The model the run asked for, else the default it ran with, saying which."""
        if run.model:
            return run.model
        default = run_model(run)
        return f"{default} (default)" if default else "the engine's own default"

    @admin.action(description="Export the interaction history of the selected runs (CSV)")
    def export_interactions_csv(self, request, queryset: QuerySet[Run]) -> HttpResponse:
        return _download(as_csv(interaction_records(queryset)), "text/csv", "csv")

    @admin.action(description="Export the interaction history of the selected runs (JSON)")
    def export_interactions_json(self, request, queryset: QuerySet[Run]) -> HttpResponse:
        return _download(as_json(interaction_records(queryset)), "application/json", "json")

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "events", "effective_model"]

    def get_fieldsets(self, request, obj=None):
        fieldsets = [(title, {**options, "fields": self.shown(options["fields"])}) for title, options in RUN_FIELDSETS]
        listed = {name for _, options in fieldsets for name in options["fields"]}
        rest = [name for name in self.get_readonly_fields(request, obj) if name not in listed]
        return [*fieldsets, ("Worker", {"fields": rest, "classes": ["collapse"]})]

    @admin.display(description="events")
    def events(self, run: Run) -> str:
        url = reverse("admin:runs_runevent_changelist")
        return format_html('<a href="{}?run__exact={}">{} events</a>', url, run.pk, run.last_event_seq)


@admin.register(Interaction)
class InteractionAdmin(ReadableAnswer, ReadOnlyAdmin):
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
    list_filter = ("resolution_mode", "kind", RunEngineFilter, "run__skill", "asked_at")
    search_fields = ("run__request_id", "run__owner__username", "run__skill__skill_id", "prompt", "response")
    search_help_text = "Searches run ids, owners' user names, skill ids, questions and answers."
    show_full_result_count = False

    @admin.display(description="prompt")
    def short_prompt(self, interaction: Interaction) -> str:
        return truncatechars(interaction.prompt, SHORT_TEXT)

    @admin.display(description="response")
    def short_response(self, interaction: Interaction) -> str:
        return "—" if interaction.response is None else truncatechars(interaction.answer_text, SHORT_TEXT)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "kind", "created_at")
    list_select_related = ("run",)
    list_filter = ("kind", "created_at")  # kind has choices: no DISTINCT over the events
    search_fields = ("run__request_id", "kind")
    ordering = ("-id",)  # newest first, straight off the primary key
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a count per kind would scan every event
