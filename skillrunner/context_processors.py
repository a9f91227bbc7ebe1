"""Template context every page shares."""

from __future__ import annotations

from django.conf import settings

SANDBOX_OFF_TEXT = (
    "The agent sandbox is switched off (SKILLRUNNER_SANDBOX=off): agents run unconfined, as the "
    "service's own user, and can read the database, the secret key and every run's files."
)


def sandbox(request) -> dict:
    """The banner of R-SB6 on every page and in the admin while agents run unconfined."""
    return {"sandbox_off": settings.SKILLRUNNER_SANDBOX == "off", "sandbox_off_text": SANDBOX_OFF_TEXT}
