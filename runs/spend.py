"""Model tokens a run and its owner may spend at the provider relay, and have spent (R-SB9).

The relay counts every model call's tokens as the provider reports them; the worker records them
as the turn goes (services.record_relay_activity) into the run and its owner's day, so a user's
runs running at once see each other's spending within a claim check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.utils import timezone

from accounts.models import SpendLimit
from engines.relay import BudgetExceeded, RelayLedger, SpendLimits
from kernel.compiled import PreparedQuery, one_or_none

from .models import Run, TokenSpend


def _or_none(limit: int | None) -> int | None:
    return limit or None  # 0 is no limit


# Read at every turn's start: compiled once per process (kernel.compiled).
_OWN_DAILY_LIMIT = PreparedQuery(
    lambda user_id: SpendLimit.objects.filter(user_id=user_id).values_list("max_tokens_per_day")[:1],
    SpendLimit._meta.get_field("user"),
)


def user_daily_limit(user_id: int) -> int | None:
    """The user's own daily budget set in admin, else the operator's; None: no limit."""
    own = _OWN_DAILY_LIMIT.rows(user_id)
    return daily_limit(own[0][0] if own else None)


def daily_limit(own: int | None) -> int | None:
    """A user's daily budget from their own limit (None: they have none); None: no limit."""
    return _or_none(own if own is not None else settings.SKILLRUNNER_USER_MAX_TOKENS_PER_DAY)


def spent_today(user_id: int) -> int:
    row = TokenSpend.objects.filter(owner_id=user_id, day=timezone.localdate()).values_list("tokens", flat=True)
    return one_or_none(row) or 0


def run_limit(run: Run) -> int | None:
    """The run's own `max_tokens`, else the operator's SKILLRUNNER_RUN_MAX_TOKENS."""
    return _or_none(run.options.max_tokens or settings.SKILLRUNNER_RUN_MAX_TOKENS)


def budget_exceeded(own_daily_limit: int | None, spent: int | None) -> BudgetExceeded | None:
    """The user's day budget (their own limit, else the operator's), when `spent` is all of it:
    a new run is refused (R-SB9)."""
    limit = daily_limit(own_daily_limit)
    if limit is None:
        return None
    return BudgetExceeded("user_day", spent or 0, limit) if (spent or 0) >= limit else None


def relay_ledger(run: Run) -> RelayLedger:
    """The ledger of the engine process about to start for `run`: its limits and what was spent."""
    daily = user_daily_limit(run.owner_id)
    limits = SpendLimits(
        run_max_tokens=run_limit(run),
        user_max_tokens_per_day=daily,
        max_calls_per_minute=_or_none(settings.SKILLRUNNER_RUN_MAX_MODEL_CALLS_PER_MINUTE),
    )
    # The day's spending matters only under a daily limit: no read for it on every turn otherwise.
    return RelayLedger(limits, run_spent=run.model_tokens, user_spent_today=spent_today(run.owner_id) if daily else 0)


def settings_context(user, shown: Mapping[str, Any]) -> dict[str, Any]:
    """The settings page's spending section (registered in RunsConfig.ready)."""
    return {
        "spent_today": spent_today(user.pk),
        "daily_limit": user_daily_limit(user.pk),
        "run_limit": _or_none(settings.SKILLRUNNER_RUN_MAX_TOKENS),
    }
