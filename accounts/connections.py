"""Live connections (websockets and event streams): the per-user cap (R-FS2), and ending them
when the credential they were opened with is revoked or its session ends (R-FS3).

One LiveConnection row per open connection. The web process holding connections renews their
rows in one query per interval (live.watcher), whatever their number; a process that dies stops
renewing, and its rows stop counting after LEASE_SECONDS. Ending a credential deletes its rows
and, with a cross-process channel layer, wakes the connections at once; without one each web
process notices its rows are gone at its next check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kernel.errors import ApplicationError, OverUserLimit
from processes.group_messages import send_to_groups

from .models import ApiToken, LiveConnection, expired, lock_user

LEASE_SECONDS = 90
RENEW_SECONDS = 30
# The message a connection's listener gets when its credential ends.
ENDED = "connection.ended"
# In chunks, so a process holding thousands of connections never builds one huge query.
ID_CHUNK = 500


class TooManyStreams(OverUserLimit):
    def __init__(self) -> None:
        limit = settings.SKILLRUNNER_USER_MAX_STREAMS
        super().__init__(
            "TOO_MANY_STREAMS",
            f"{limit} live connections (websockets and event streams)",
            "close one and try again",
            limit=limit,
        )


def credential_group(connection: LiveConnection) -> str | None:
    """The channel-layer group told when this connection's credential ends."""
    if connection.token_id is not None:
        return f"token-{connection.token_id}"
    if connection.session_key:  # a secret: the group is named after its digest
        return f"session-{hashlib.sha256(connection.session_key.encode()).hexdigest()[:40]}"
    return None


@transaction.atomic
def open_connection(user, *, token: ApiToken | None = None, session_key: str | None = None) -> LiveConnection:
    """Count a new connection of `user`, or raise TooManyStreams (429) when they hold the most
    allowed, or NOT_AUTHENTICATED (401) when `token` was revoked, or the password of a browser
    session's user changed, since it authenticated the caller."""
    # The password is read under the user's lock, after a password change's update committed or
    # before it could start: a session the change ended is refused here or has its row ended by it.
    stored_password = lock_user(user)
    now = timezone.now()
    if token is not None and not _still_active(token):
        raise ApplicationError("NOT_AUTHENTICATED", "this token has been revoked or has expired", status_code=401)
    if session_key and stored_password != user.password:
        raise ApplicationError("NOT_AUTHENTICATED", "this session ended: the password changed", status_code=401)
    mine = LiveConnection.objects.filter(user=user)
    mine.filter(expires_at__lte=now).delete()  # left by a process that died
    if mine.count() >= settings.SKILLRUNNER_USER_MAX_STREAMS:
        raise TooManyStreams()
    return LiveConnection.objects.create(
        user=user,
        token=token,
        session_key=session_key or "",
        expires_at=now + timedelta(seconds=LEASE_SECONDS),
    )


def _still_active(token: ApiToken) -> bool:
    """Locks the token row as revoke_tokens does: a token revoked meanwhile either refuses the
    connection here or finds its row when ending its connections, never neither."""
    still = ApiToken.objects.select_for_update().active().filter(pk=token.pk)
    return still.values_list("pk", flat=True).first() is not None


def close_connection(connection_id: UUID) -> None:
    LiveConnection.objects.filter(pk=connection_id).delete()


def keep_connections(connection_ids: Iterable[UUID], *, renew: bool) -> set[UUID]:
    """Those of `connection_ids` still open; `renew` extends their lease. Ends those whose token
    was revoked or has expired, or whose user was deactivated by a path that did not end them itself (a direct
    update, the admin's change form), and those whose browser session expired or was removed."""
    ids = list(connection_ids)
    alive: set[UUID] = set()
    now = timezone.now()
    expires_at = now + timedelta(seconds=LEASE_SECONDS)
    for start in range(0, len(ids), ID_CHUNK):
        rows = LiveConnection.objects.filter(pk__in=ids[start : start + ID_CHUNK])
        # Looked for first: a delete takes SQLite's write lock even when it finds nothing, and the
        # watcher's thread, which also reads for the live listeners, waited on the worker's writes.
        if ended := list(rows.filter(_credential_ended(now)).values_list("pk", flat=True)):
            LiveConnection.objects.filter(pk__in=ended).delete()
        if renew:
            rows.update(expires_at=expires_at)
        alive.update(rows.values_list("pk", flat=True))
    return alive


def _credential_ended(now) -> Q:
    ended = Q(token__revoked_at__isnull=False) | expired(now, via="token__") | Q(user__is_active=False)
    if settings.SESSION_ENGINE == "django.contrib.sessions.backends.db":  # sessions elsewhere: sign-out only
        live_sessions = Session.objects.filter(expire_date__gt=now).values("session_key")
        ended |= ~Q(session_key="") & ~Q(session_key__in=live_sessions)
    return ended


def end_connections(
    *, token_ids: Iterable[int] = (), session_key: str | None = None, sessions_of_user: int | None = None
) -> None:
    """Close the connections opened with these tokens, this browser session or any browser
    session of this user, once the caller's transaction commits."""
    token_ids = list(token_ids)
    ended = LiveConnection.objects.none()
    if token_ids:
        ended = ended | LiveConnection.objects.filter(token_id__in=token_ids)
    if session_key:
        ended = ended | LiveConnection.objects.filter(session_key=session_key)
    if sessions_of_user is not None:
        ended = ended | LiveConnection.objects.filter(user_id=sessions_of_user).exclude(session_key="")
    groups = {credential_group(connection) for connection in ended}
    ended.delete()
    transaction.on_commit(lambda: _tell(group for group in groups if group))


def note_password_change(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    """On the user model's pre_save: whether this save stores a new password (set_password + save
    from anywhere: the admin's forms, `manage.py changepassword`, a shell)."""
    changed = False
    if not raw and instance.pk is not None and (update_fields is None or "password" in update_fields):
        stored = sender.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
        changed = stored is not None and stored != instance.password
    instance._ends_browser_sessions = changed


def end_sessions_on_password_change(sender, instance, raw=False, **kwargs) -> None:
    """On the user model's post_save: a new password ends the user's browser sessions (Django
    refuses them at their next request), so it closes their sockets and streams too (R-FS3). After
    the update, not before: a connection opening meanwhile is either seen here or refused by
    open_connection. API tokens are credentials of their own: they stay until revoked."""
    if not raw and getattr(instance, "_ends_browser_sessions", False):
        instance._ends_browser_sessions = False
        end_connections(sessions_of_user=instance.pk)


def end_session_connections(sender, request, **kwargs) -> None:
    """On user_logged_out: signing out closes the sockets and streams of that browser session (R-FS3)."""
    end_connections(session_key=request.session.session_key)


def _tell(groups: Iterable[str]) -> None:
    """Best effort: without a cross-process layer, or if this message is lost, each web process
    finds its ended connections at its next check (live.watcher)."""
    send_to_groups((group, {"type": ENDED}) for group in groups)
