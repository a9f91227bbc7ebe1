"""The figures of GET /metrics (R-OP11), read from the shared database at each scrape.

Every figure is in the database already: the state of runs, slots, waits, deliveries and live
connections, and what past runs did, counted as it happened (metrics.receivers, metrics.models):
each turn's duration, how each run ended, the provider relay's tokens and refusals. Reading them
there, rather than counting in the processes that cause them, makes the figures the service's
whole, however many worker processes forked them and on however many machines: any web answers the
same, nothing is lost when a process restarts, and no scrape directory is shared. Each figure is
one query: a few counter rows, or an aggregate that starts from an index. None reads run events or
turns, nor the runs that ended; only the deliveries' counts by state (webhooks, question emails)
read an index as long as the rows stored (bench/metrics.py: the scrape's cost beside 10,000 runs;
tests/metrics: a scrape's statements do not grow with the runs).

The counted figures only grow, whatever retention removes (SKILLRUNNER_RUN_RETENTION_DELETE_ROWS).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from itertools import accumulate

from django.conf import settings
from django.db.models import Count, F, Min
from django.utils import timezone
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from accounts.models import LiveConnection
from notifications.models import QuestionEmail, WebhookDelivery
from runs.models import TERMINAL_STATUSES, Interaction, Run, RunStatus
from runs.services.dispatching import ready_queue_length

from .models import ModelTokens, RelayRefusals, RunEnds, TurnDurations
from .receivers import TURN_DURATION_BUCKETS

UNDER_WAY = [status for status in RunStatus.values if status not in TERMINAL_STATUSES]

# A failed run whose error has no code (none is stored so today) still counts, under this label.
NO_CODE = "NONE"


class ServiceCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        ended = list(RunEnds.objects.values_list("status", "code", "runs"))
        yield runs_by_status(ended)
        yield failed_runs_by_code(ended)
        yield GaugeMetricFamily(
            "skillrunner_queue_depth", "Queued runs ready to take a slot (uploads awaited aside).", ready_queue_length()
        )
        yield oldest_wait()
        yield from slots()
        yield turn_durations()
        yield model_tokens()
        yield relay_refusals()
        yield webhook_deliveries()
        yield question_emails()
        yield GaugeMetricFamily(
            "skillrunner_live_connections",
            "Open websockets and event streams, all web processes together.",
            LiveConnection.objects.filter(expires_at__gt=timezone.now()).count(),
        )


def runs_by_status(ended: list[tuple[str, str, int]]) -> GaugeMetricFamily:
    """The runs under way as they stand, from the status index (as many as the service runs and
    waits for); the runs that ended, as counted (as many as ever ended: too many to count here)."""
    family = GaugeMetricFamily(
        "skillrunner_runs", "Runs under way, by status; runs that ended, by how they ended.", labels=["status"]
    )
    under_way = Run.objects.filter(status__in=UNDER_WAY).order_by().values_list("status")  # IN: the index's ranges
    counts: dict[str, int] = dict(under_way.annotate(runs=Count("*")))  # COUNT(*): from the index alone
    for status, _, runs in ended:
        counts[status] = counts.get(status, 0) + runs
    for status in RunStatus.values:  # every status, 0 included: a panel's series never vanishes
        family.add_metric([status], counts.get(status, 0))
    return family


def failed_runs_by_code(ended: list[tuple[str, str, int]]) -> GaugeMetricFamily:
    """A gauge by its name in README, though it only grows: the runs that ever failed."""
    family = GaugeMetricFamily("skillrunner_failed_runs", "Runs that failed, by error code.", labels=["code"])
    for status, code, runs in ended:
        if status == RunStatus.FAILED:
            family.add_metric([code or NO_CODE], runs)
    return family


def oldest_wait() -> GaugeMetricFamily:
    """From the open question each waiting run holds (its asked_at): 0 when nobody is waited for."""
    asked = Interaction.objects.filter(
        run__status=RunStatus.WAITING_USER,
        run__pending_interaction_id=F("interaction_id"),
        answered_at__isnull=True,
    ).aggregate(oldest=Min("asked_at"))["oldest"]
    seconds = max((timezone.now() - asked).total_seconds(), 0.0) if asked else 0.0
    return GaugeMetricFamily(
        "skillrunner_waiting_user_oldest_seconds",
        "How long the longest-waiting open question has waited for a person.",
        seconds,
    )


def slots() -> Iterator[GaugeMetricFamily]:
    used = Run.objects.filter(holds_slot=True).count()
    capacity = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS
    yield GaugeMetricFamily(
        "skillrunner_slots_used", "Slots held: running turns and waits that keep their process.", used
    )
    yield GaugeMetricFamily(
        "skillrunner_slots_free", "Slots free of SKILLRUNNER_MAX_CONCURRENT_TURNS.", max(capacity - used, 0)
    )


def turn_durations() -> HistogramMetricFamily:
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * (len(TURN_DURATION_BUCKETS) + 1))
    total_ms: dict[str, int] = defaultdict(int)
    for engine, bucket, turns, duration_ms in TurnDurations.objects.values_list(
        "engine", "bucket", "turns", "duration_ms"
    ):
        counts[engine][bucket] = turns
        total_ms[engine] += duration_ms
    family = HistogramMetricFamily(
        "skillrunner_turn_duration_seconds", "Engine turns by how long they ran, per engine.", labels=["engine"]
    )
    bounds = [str(bound) for bound in TURN_DURATION_BUCKETS] + ["+Inf"]
    for engine, per_bucket in sorted(counts.items()):
        cumulative = list(accumulate(per_bucket))
        family.add_metric([engine], list(zip(bounds, cumulative, strict=True)), total_ms[engine] / 1000)
    return family


def model_tokens() -> CounterMetricFamily:
    family = CounterMetricFamily(
        "skillrunner_model_tokens", "Model tokens the provider relay counted, per engine.", labels=["engine"]
    )
    for engine, tokens in ModelTokens.objects.values_list("engine", "tokens"):
        family.add_metric([engine], tokens)
    return family


def relay_refusals() -> CounterMetricFamily:
    family = CounterMetricFamily(
        "skillrunner_relay_refusals",
        "Requests of an engine the provider relay refused, per engine and reason.",
        labels=["engine", "reason"],
    )
    for engine, reason, count in RelayRefusals.objects.values_list("engine", "reason", "refusals"):
        family.add_metric([engine, reason], count)
    return family


def webhook_deliveries() -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "skillrunner_webhook_deliveries", "Webhook deliveries stored, by state.", labels=["state"]
    )
    counts = dict(WebhookDelivery.objects.order_by().values_list("state").annotate(Count("pk")))
    for state in WebhookDelivery.State.values:
        family.add_metric([state], counts.get(state, 0))
    return family


def question_emails() -> GaugeMetricFamily:
    """The question emails' outbox (R-NT3), as the webhook deliveries'."""
    family = GaugeMetricFamily("skillrunner_question_emails", "Question emails stored, by state.", labels=["state"])
    counts = dict(QuestionEmail.objects.order_by().values_list("state").annotate(Count("pk")))
    for state in QuestionEmail.State.values:
        family.add_metric([state], counts.get(state, 0))
    return family
