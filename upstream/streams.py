"""Upstream's conversation streams read from the run's one event log (SPEC R-UP5): the cursor
and range parameters, the histories, and the server-sent-event framing of `/events?cursor=` and
`/chat`. The translation itself is upstream.fcmp's; the loop that follows the log is the core's
(live.sse.follow_log), so these streams count as live connections, wake on the run's
changes without polling, and end when their credential does, exactly like the core's.

Cursors are event seqs (see upstream.fcmp): `cursor=N` streams what follows event N, and a range
`from_seq..to_seq` is inclusive at both ends, as upstream has it. `cursor_floor` is the oldest
seq the log holds (it keeps a run's whole history: 1, or 0 while it is empty) and
`cursor_ceiling` the newest one an answer accounts for (the log's newest, unless a range or a
history's limit ends it sooner): resuming from it misses nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Max, Min
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from kernel.errors import ApplicationError
from runs.models import TERMINAL_STATUSES, Run, RunEvent, RunStatus

from .fcmp import POSITION_KEYS, LogPosition, Reading, RunFacts, step

HEARTBEAT_SECONDS = 5.0  # upstream's interval
HISTORY_EVENTS = 1000  # events one history answer reads at most; the ceiling then says where it stopped
SEQ_MAX = 2**31 - 1  # no run gets near it; a larger bound means the same as this one
# Upstream names where its answers come from; here it is always the stored log.
SOURCE = "audit"

STREAM_PARAMETERS = ("cursor",)
RANGE_PARAMETERS = ("from_seq", "to_seq", "from_ts", "to_ts")


def asks_for(query, names: Iterable[str]) -> bool:
    """Whether a request uses upstream's form: it names one of upstream's parameters."""
    return any(name in query for name in names)


# ---- parameters -----------------------------------------------------------------------------


def _seq(query, name: str) -> int | None:
    raw = query.get(name, "")
    if raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()):  # "²".isdigit() is true, and int() refuses it
        raise ApplicationError("INVALID_CURSOR", f"{name} must be a non-negative integer")
    return min(int(raw), SEQ_MAX)


def cursor(query) -> int:
    return _seq(query, "cursor") or 0


_SPACED_OFFSET = re.compile(r" (\d\d:?\d\d)$")


def _timestamp(query, name: str) -> datetime | None:
    raw = query.get(name, "")
    if raw == "":
        return None
    # A `+hh:mm` offset sent without URL-encoding arrives as a space.
    raw = _SPACED_OFFSET.sub(r"+\1", raw)
    try:
        parsed = parse_datetime(raw)
        if parsed is not None:
            # Upstream writes naive UTC times: a time without an offset is one of those.
            parsed = parsed.astimezone(UTC) if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        parsed = None
    if parsed is None:
        raise ApplicationError("INVALID_TIMESTAMP", f"{name} must be an ISO 8601 date and time")
    return parsed


@dataclass(frozen=True)
class Window:
    """Which events a history answer covers; every bound inclusive, every bound optional."""

    from_seq: int | None = None
    to_seq: int | None = None
    from_ts: datetime | None = None
    to_ts: datetime | None = None

    @classmethod
    def of(cls, query) -> Window:
        return cls(
            _seq(query, "from_seq"), _seq(query, "to_seq"), _timestamp(query, "from_ts"), _timestamp(query, "to_ts")
        )

    def holds_time(self, moment: datetime) -> bool:
        return (self.from_ts is None or moment >= self.from_ts) and (self.to_ts is None or moment <= self.to_ts)


# ---- reading the log -------------------------------------------------------------------------


def facts(run: Run) -> RunFacts:
    return RunFacts(request_id=str(run.pk), engine=run.engine)


def position_at(request_id, seq: int) -> LogPosition:
    """The log's position after event `seq`: what translating the events after it needs. Reads
    only the few payload keys `step` looks at, not the events themselves."""
    position = LogPosition()
    if seq <= 0:
        return position
    keys = [f"payload__{key}" for key in POSITION_KEYS]
    rows = RunEvent.objects.filter(run_id=request_id, seq__lte=seq).order_by("seq").values_list("seq", "kind", *keys)
    for event_seq, kind, *values in rows.iterator():
        position = step(position, kind, dict(zip(POSITION_KEYS, values, strict=True)), event_seq)
    return position


def _last_seq(window: Window, newest: int) -> int:
    return newest if window.to_seq is None else min(window.to_seq, newest)


def _seq_bounds(run: Run, window: Window, newest: int) -> tuple[int, int]:
    """The first and last seq `window` can hold, its times turned into seqs."""
    first, last = max(window.from_seq or 1, 1), _last_seq(window, newest)
    if first <= last and (window.from_ts is not None or window.to_ts is not None):
        timed = RunEvent.objects.filter(run=run)
        if window.from_ts is not None:
            timed = timed.filter(created_at__gte=window.from_ts)
        if window.to_ts is not None:
            timed = timed.filter(created_at__lte=window.to_ts)
        bounds = timed.aggregate(first=Min("seq"), last=Max("seq"))
        if bounds["first"] is None:
            return 1, 0
        first, last = max(first, bounds["first"]), min(last, bounds["last"])
    return first, last


def history(run: Run, window: Window, reading: Reading) -> dict[str, Any]:
    """Upstream's history answer: the items of `reading` (FCMP or chat) in `window`, from at most
    HISTORY_EVENTS events; `cursor_ceiling` is the last seq the answer accounts for (where it was
    cut, or the window's end), so asking again after it continues where it stopped."""
    newest = run.last_event_seq  # read before the events: every event up to it is committed
    first, last = _seq_bounds(run, window, newest)
    events: list[RunEvent] = []
    shown: list[dict[str, Any]] = []
    if first <= last:
        events = list(RunEvent.objects.filter(run=run, seq__gte=first, seq__lte=last).order_by("seq")[:HISTORY_EVENTS])
        # Every event of the range is read (the fold needs them all), then the times are applied.
        items, _ = reading(events, position_at(run.pk, first - 1), facts(run))
        timed = {event.seq for event in events if window.holds_time(event.created_at)}
        shown = [item for item in items if item["seq"] in timed]
    cut = len(events) == HISTORY_EVENTS and events[-1].seq < last
    return {
        "request_id": str(run.pk),
        "count": len(shown),
        "events": shown,
        "cursor_floor": 1 if newest else 0,
        "cursor_ceiling": events[-1].seq if cut else _last_seq(window, newest),
        "source": SOURCE,
    }


# ---- server-sent events ----------------------------------------------------------------------


def _frame(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


class ConversationFraming:
    """Upstream's framing (live.sse.Framing): a `snapshot` first, then one `chat_event` per
    item of `reading`, a `heartbeat` every HEARTBEAT_SECONDS of silence, and the end once the run
    waits for its user or has ended — upstream's clients reconnect from the last seq they saw."""

    heartbeat_seconds = HEARTBEAT_SECONDS

    def __init__(self, run: Run, cursor: int, reading: Reading) -> None:
        self.request_id = run.pk
        self.facts = facts(run)
        self.cursor = cursor
        self.reading = reading
        self.position = LogPosition()

    def opening(self) -> str:
        run = (
            Run.objects.filter(pk=self.request_id).values("status", "pending_interaction_id", "last_event_seq").first()
        )
        run = run or {"status": RunStatus.QUEUED, "pending_interaction_id": None, "last_event_seq": 0}
        self.position = position_at(self.request_id, self.cursor)
        snapshot: dict[str, Any] = {
            "status": run["status"],
            "cursor": self.cursor,
            "cursor_floor": 1 if run["last_event_seq"] else 0,
            "cursor_ceiling": run["last_event_seq"],
            "replay_source": SOURCE,
        }
        if run["pending_interaction_id"] is not None:
            snapshot["pending_interaction_id"] = run["pending_interaction_id"]
        return _frame("snapshot", snapshot)

    def frames(self, events: list[RunEvent]) -> Iterable[str]:
        items, self.position = self.reading(events, self.position, self.facts)
        return [_frame("chat_event", item) for item in items]

    def keep_alive(self) -> str:
        return _frame("heartbeat", {"ts": timezone.now().isoformat()})

    def rests(self, status: str) -> bool:
        return status == RunStatus.WAITING_USER or status in TERMINAL_STATUSES

    def closing(self) -> str:
        return ""  # upstream just ends the stream

    def credential_ended(self, detail: dict[str, Any]) -> str:
        return _frame("error", detail)
