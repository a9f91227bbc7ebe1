"""Token usage, cost and duration per turn and per run (R-AC4): recording, run totals, aggregates."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import TruncDate

from kernel.compiled import WrittenInsert

from . import hooks
from .models import Run, TurnUsage

USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "duration_ms")
GROUPS = {
    "skill": F("run__skill__skill_id"),
    "engine": F("run__engine"),
    "user": F("run__owner__username"),
    "day": TruncDate("created_at"),
}


def record_turn_usage(run: Run, attempt_number: int, usage: dict[str, Any] | None, duration_ms: int | None) -> None:
    """Called inside the transaction that completes the turn."""
    reported = usage or {}
    row = TurnUsage(
        run=run,
        attempt_number=attempt_number,
        duration_ms=duration_ms,
        **{key: reported.get(key) for key in USAGE_KEYS if key != "duration_ms"},
    )
    _INSERT.insert([row])  # 0.044 ms of CPU against the ORM's 0.115 (issue #43)
    hooks.turn_recorded.send(sender=Run, run=run, duration_ms=duration_ms)


_INSERT = WrittenInsert(TurnUsage, "run", "attempt_number", *USAGE_KEYS, "created_at")


def _sum(values: list[Any]) -> Any:
    """A total of what was reported; null when no turn reported the key."""
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def run_usage(turn_usage: Iterable[TurnUsage]) -> dict[str, Any]:
    """`usage` of GET /v1/jobs/{id}: run totals and one entry per turn, unreported keys null."""
    turns = [{"attempt": turn.attempt_number, **{key: getattr(turn, key) for key in USAGE_KEYS}} for turn in turn_usage]
    return {**{key: _sum([turn[key] for turn in turns]) for key in USAGE_KEYS}, "turns": turns}


def aggregate(turns: QuerySet[TurnUsage], group_by: str) -> list[dict[str, Any]]:
    """Totals per group (skill, engine, user or day), largest token use first within a day order."""
    rows = (
        turns.annotate(group=GROUPS[group_by])
        .values("group")
        .annotate(
            runs=Count("run", distinct=True),
            turns=Count("id"),
            **{key: Sum(key) for key in USAGE_KEYS},
        )
        .order_by("group")
    )
    return [{**row, "group": str(row["group"])} for row in rows]
