"""Rate limits between tests: counters forgotten, so one test's requests never throttle the next."""

from __future__ import annotations

THROTTLE_SCOPES = ("run_create", "interaction_reply", "skill_install", "settings_change")


def forget_throttling(*users) -> None:
    """Drop the DRF throttle counters of these users: only those keys, since the cache may be a
    shared Redis (clearing it would wipe other processes' data)."""
    from django.core.cache import cache

    cache.delete_many([f"throttle_{scope}_{user.pk}" for scope in THROTTLE_SCOPES for user in users])
