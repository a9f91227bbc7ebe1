"""Counting what the scrape reports as it happens, in the transaction that records it: a turn's
duration as its usage is saved, a run's end as it moves to its last status, the provider relay's
tokens and refusals as they are added to the run. Each is counted once, with the change, on
whichever worker made it; rolled back with it, it was never counted."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from kernel.counters import add_to_row
from runs.models import TERMINAL_STATUSES, Run

from .models import ModelTokens, RelayRefusals, RunEnds, TurnDurations

# Upper bounds of the turn duration buckets, seconds: engine turns take seconds to minutes, up to
# the hard timeout (SKILLRUNNER_DEFAULT_HARD_TIMEOUT 1200 s, at most SKILLRUNNER_MAX_HARD_TIMEOUT).
# The stored counts are per bucket index: changing these needs a migration that counts again.
TURN_DURATION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0, 21600.0)


def bucket_of(duration_ms: int) -> int:
    """The first bucket whose bound the duration does not exceed (`le`); past them all, the last."""
    return bisect_left(TURN_DURATION_BUCKETS, duration_ms / 1000)


def count_turn(sender, run: Run, duration_ms: int | None, **kwargs) -> None:
    """runs.hooks.turn_recorded: a turn's usage, with the duration the worker measured."""
    if duration_ms is not None:
        add_to_row(
            TurnDurations, {"engine": run.engine, "bucket": bucket_of(duration_ms)}, turns=1, duration_ms=duration_ms
        )


def count_run_end(sender, run: Run, **kwargs) -> None:
    """runs.hooks.status_changed: a run ends once (a terminal status is never left)."""
    if run.status in TERMINAL_STATUSES:
        add_to_row(RunEnds, {"status": run.status, "code": (run.error or {}).get("code") or ""}, runs=1)


def count_relay_activity(sender, run: Run, tokens: int, reasons: list[str], **kwargs) -> None:
    """runs.hooks.relay_recorded."""
    if tokens:
        add_to_row(ModelTokens, {"engine": run.engine}, tokens=tokens)
    for reason, count in Counter(reasons).items():
        add_to_row(RelayRefusals, {"engine": run.engine, "reason": reason}, refusals=count)
