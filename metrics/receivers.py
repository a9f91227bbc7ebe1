"""Counting each turn into the duration histogram as its usage is recorded, in the transaction
that completes the turn: a turn is counted once, with it, on whichever worker ran it."""

from __future__ import annotations

from bisect import bisect_left

from kernel.counters import add_to_row
from runs.models import TurnUsage

from .models import TurnDurations

# Upper bounds of the turn duration buckets, seconds: engine turns take seconds to minutes, up to
# the hard timeout (SKILLRUNNER_DEFAULT_HARD_TIMEOUT 1200 s, at most SKILLRUNNER_MAX_HARD_TIMEOUT).
# The stored counts are per bucket index: changing these needs a migration that counts again.
TURN_DURATION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0, 21600.0)


def bucket_of(duration_ms: int) -> int:
    """The first bucket whose bound the duration does not exceed (`le`); past them all, the last."""
    return bisect_left(TURN_DURATION_BUCKETS, duration_ms / 1000)


def count_turn(sender, instance: TurnUsage, created: bool, raw: bool = False, **kwargs) -> None:
    """post_save of TurnUsage."""
    if not created or raw or instance.duration_ms is None:
        return
    key = {"engine": instance.run.engine, "bucket": bucket_of(instance.duration_ms)}
    add_to_row(TurnDurations, key, turns=1, duration_ms=instance.duration_ms)
