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


def local_mode(request) -> dict:
    """Whether the page is the local user's in local mode (R-UP1): reached by being on this
    machine, never by a password, so the header offers no "Log out" (it would land on a login
    form the local user cannot use)."""
    user = getattr(request, "user", None)
    is_local = (
        settings.SKILLRUNNER_LOCAL_MODE and user is not None and user.get_username() == settings.SKILLRUNNER_LOCAL_USER
    )
    return {"local_session": is_local}
