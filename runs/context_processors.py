"""Template context for every page."""

from __future__ import annotations

from . import selectors


def inbox(request) -> dict[str, int]:
    """The nav bar's count of waiting questions (R-NT4), correct before any script runs."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"inbox_count": selectors.waiting_questions(user).count()}
