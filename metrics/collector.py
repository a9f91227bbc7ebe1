"""The figures of GET /metrics (R-OP11), read from the shared database at each scrape.

Every figure is in the database already: the state of runs, slots, waits, deliveries and live
connections, and what past runs and deliveries did, counted as it happened (metrics.receivers,
metrics.models, notifications.models.OutboxEnds): each turn's duration, how each run ended, the
provider relay's tokens and refusals, how each webhook delivery and question email ended. Reading
them there, rather than counting in the processes that cause them, makes the figures the service's
whole, however many worker processes forked them and on however many machines: any web answers the
same, nothing is lost when a process restarts, and no scrape directory is shared.

A scrape is two statements (beside its request's own: the token), one round trip each, compiled
once per process (`kernel.compiled.CompiledQuery`: for these statements Django's
building and compiling costs several times the database's own work); neither reads more rows as
runs, turns, events or deliveries are stored (bench/metrics.py: the scrape's cost beside 10,000
runs; tests/metrics/test_counters.py pins the statements):

| statement (read by) | its rows | the families built from them |
|---|---|---|
| `all_counter_rows()` (`counted()`) | every counter row, by its table (a few dozen) | `runs` (ended), `failed_runs`, `turn_duration_seconds`, `model_tokens`, `relay_refusals`, `webhook_deliveries` and `question_emails` (ended) |
| `the_service_as_it_stands()` (`standing()`) | one: the runs under way by status, from the status index; each other figure a subquery of an index's range | `runs` (under way), `queue_depth`, `waiting_user_oldest_seconds`, `slots_used`, `slots_free`, `webhook_deliveries` and `question_emails` (pending), `live_connections` |

The counted figures only grow, whatever retention removes (SKILLRUNNER_RUN_RETENTION_DELETE_ROWS).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from itertools import accumulate
from typing import Any

from django.conf import settings
from django.db.models import Aggregate, CharField, Count, F, Min, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Cast, Now
from django.utils import timezone
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from accounts.models import LiveConnection
from kernel.compiled import CompiledQuery
from notifications.models import PENDING, OutboxEnds, QuestionEmail, WebhookDelivery
from runs.models import TERMINAL_STATUSES, Interaction, Run, RunStatus
from runs.services.dispatching import ready_places

from .models import ModelTokens, RelayRefusals, RunEnds, TurnDurations
from .receivers import TURN_DURATION_BUCKETS

UNDER_WAY = [status for status in RunStatus.values if status not in TERMINAL_STATUSES]
Outbox = type[WebhookDelivery] | type[QuestionEmail]
OUTBOXES: tuple[Outbox, ...] = (WebhookDelivery, QuestionEmail)

# A failed run whose error has no code (none is stored so today) still counts, under this label.
NO_CODE = "NONE"

# A counter row as counted() reads it: two labels ("" where its table has one), its count, and a
# sum beside the count (the turns' milliseconds; 0 for the others).
Row = tuple[str, str, int, int]


class ServiceCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        counters, now = counted(), standing()
        yield runs_by_status(counters["run_ends"], now)
        yield failed_runs_by_code(counters["run_ends"])
        yield GaugeMetricFamily(
            "skillrunner_queue_depth",
            "Queued runs ready to take a slot (uploads awaited aside).",
            now["queue_depth"] or 0,  # SUM of no places
        )
        yield oldest_wait(now["oldest_question"])
        yield from slots(now["slots_used"])
        yield turn_durations(counters["turn_durations"])
        yield model_tokens(counters["model_tokens"])
        yield relay_refusals(counters["relay_refusals"])
        yield outbox_states(WebhookDelivery, "skillrunner_webhook_deliveries", "Webhook deliveries", counters, now)
        yield outbox_states(QuestionEmail, "skillrunner_question_emails", "Question emails", counters, now)
        yield GaugeMetricFamily(
            "skillrunner_live_connections",
            "Open websockets and event streams, all web processes together.",
            now["live_connections"],
        )


def all_counter_rows() -> QuerySet:
    """Every counter row, in one statement (UNION ALL), tagged with the table it comes from."""
    first, *others = [
        RunEnds.objects.values_list(Value("run_ends"), "status", "code", "runs", Value(0)),
        TurnDurations.objects.values_list(
            Value("turn_durations"), "engine", Cast("bucket", CharField()), "turns", "duration_ms"
        ),
        ModelTokens.objects.values_list(Value("model_tokens"), "engine", Value(""), "tokens", Value(0)),
        RelayRefusals.objects.values_list(Value("relay_refusals"), "engine", "reason", "refusals", Value(0)),
        OutboxEnds.objects.values_list(Value("outbox_ends"), "outbox", "state", "items", Value(0)),
    ]
    return first.union(*others, all=True)


def the_service_as_it_stands() -> QuerySet:
    """One row in one statement: the runs under way counted by status from the status index (as
    many as the service runs and waits for); each other figure a subquery of an index's range."""
    by_status = {status: Count("status", filter=Q(status=status)) for status in UNDER_WAY}
    pending = {pending_key(model): one_value(model.objects.filter(state=PENDING), Count("*")) for model in OUTBOXES}
    return (
        Run.objects.filter(status__in=UNDER_WAY)
        .order_by()
        .values(whole=Value(1))  # grouped by a constant, so by nothing: one row
        .annotate(
            **by_status,
            slots_used=one_value(Run.objects.filter(holds_slot=True), Count("*")),
            queue_depth=one_value(ready_places(), Sum("ready_count")),
            oldest_question=one_value(open_questions(), Min("asked_at")),
            live_connections=one_value(LiveConnection.objects.filter(expires_at__gt=Now()), Count("*")),
            **pending,
        )
    )


COUNTED, STANDING = CompiledQuery(all_counter_rows), CompiledQuery(the_service_as_it_stands)


def counted() -> dict[str, list[Row]]:
    """Every counter row, by the table it comes from."""
    rows: dict[str, list[Row]] = defaultdict(list)
    for table, *row in COUNTED.rows():
        rows[table].append(tuple(row))
    return rows


def standing() -> dict[str, Any]:
    (row,) = STANDING.named_rows()
    return row


def one_value(rows: QuerySet, aggregate: Aggregate) -> Subquery:
    """`aggregate` of `rows` as a subquery of one value (NULL for the SUM or MIN of no rows)."""
    return Subquery(rows.order_by().values(whole=Value(1)).annotate(value=aggregate).values("value"))


def open_questions() -> QuerySet[Interaction]:
    """The open question each waiting run holds."""
    return Interaction.objects.filter(
        run__status=RunStatus.WAITING_USER,
        run__pending_interaction_id=F("interaction_id"),
        answered_at__isnull=True,
    )


def pending_key(model: Outbox) -> str:
    return f"{model.OUTBOX}_pending"


def runs_by_status(ended: list[Row], now: dict[str, Any]) -> GaugeMetricFamily:
    """The runs under way as they stand; the runs that ended, as counted (as many as ever ended:
    too many to count here)."""
    family = GaugeMetricFamily(
        "skillrunner_runs", "Runs under way, by status; runs that ended, by how they ended.", labels=["status"]
    )
    counts: dict[str, int] = {status: now[status] for status in UNDER_WAY}
    for status, _, runs, _ in ended:
        counts[status] = counts.get(status, 0) + runs
    for status in RunStatus.values:  # every status, 0 included: a panel's series never vanishes
        family.add_metric([status], counts.get(status, 0))
    return family


def failed_runs_by_code(ended: list[Row]) -> GaugeMetricFamily:
    """A gauge by its name in README, though it only grows: the runs that ever failed."""
    family = GaugeMetricFamily("skillrunner_failed_runs", "Runs that failed, by error code.", labels=["code"])
    for status, code, runs, _ in ended:
        if status == RunStatus.FAILED:
            family.add_metric([code or NO_CODE], runs)
    return family


def oldest_wait(asked: datetime | None) -> GaugeMetricFamily:
    """From the open question each waiting run holds (its asked_at): 0 when nobody is waited for."""
    seconds = max((timezone.now() - asked).total_seconds(), 0.0) if asked else 0.0
    return GaugeMetricFamily(
        "skillrunner_waiting_user_oldest_seconds",
        "How long the longest-waiting open question has waited for a person.",
        seconds,
    )


def slots(used: int) -> Iterator[GaugeMetricFamily]:
    capacity = settings.SKILLRUNNER_MAX_CONCURRENT_TURNS
    yield GaugeMetricFamily(
        "skillrunner_slots_used", "Slots held: running turns and waits that keep their process.", used
    )
    yield GaugeMetricFamily(
        "skillrunner_slots_free", "Slots free of SKILLRUNNER_MAX_CONCURRENT_TURNS.", max(capacity - used, 0)
    )


def turn_durations(rows: list[Row]) -> HistogramMetricFamily:
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * (len(TURN_DURATION_BUCKETS) + 1))
    total_ms: dict[str, int] = defaultdict(int)
    for engine, bucket, turns, duration_ms in rows:
        counts[engine][int(bucket)] = turns
        total_ms[engine] += duration_ms
    family = HistogramMetricFamily(
        "skillrunner_turn_duration_seconds", "Engine turns by how long they ran, per engine.", labels=["engine"]
    )
    bounds = [str(bound) for bound in TURN_DURATION_BUCKETS] + ["+Inf"]
    for engine, per_bucket in sorted(counts.items()):
        cumulative = list(accumulate(per_bucket))
        family.add_metric([engine], list(zip(bounds, cumulative, strict=True)), total_ms[engine] / 1000)
    return family


def model_tokens(rows: list[Row]) -> CounterMetricFamily:
    family = CounterMetricFamily(
        "skillrunner_model_tokens", "Model tokens the provider relay counted, per engine.", labels=["engine"]
    )
    for engine, _, tokens, _ in rows:
        family.add_metric([engine], tokens)
    return family


def relay_refusals(rows: list[Row]) -> CounterMetricFamily:
    family = CounterMetricFamily(
        "skillrunner_relay_refusals",
        "Requests of an engine the provider relay refused, per engine and reason.",
        labels=["engine", "reason"],
    )
    for engine, reason, count, _ in rows:
        family.add_metric([engine, reason], count)
    return family


def outbox_states(
    model: Outbox, name: str, what: str, counters: dict[str, list[Row]], now: dict[str, Any]
) -> GaugeMetricFamily:
    """An outbox's rows pending as they stand (few by nature: each is sent, or given up at the end
    of the retry schedule); the states they end in, as counted (only grow)."""
    family = GaugeMetricFamily(name, f"{what} pending; {what.lower()} that ended, by state.", labels=["state"])
    ended = {state: items for outbox, state, items, _ in counters["outbox_ends"] if outbox == model.OUTBOX}
    for state in model.State.values:
        family.add_metric([state], now[pending_key(model)] if state == PENDING else ended.get(state, 0))
    return family
