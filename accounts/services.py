"""Changes to a user's account settings."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from kernel.errors import Conflict, NotFound
from kernel.lookups import with_id

from .connections import end_connections
from .models import ApiToken, ApiTokenQuerySet, NotificationSettings, lock_user


def email_questions_enabled(user) -> bool:
    preference = NotificationSettings.objects.filter(user=user).first()
    return preference is None or preference.email_questions


@transaction.atomic
def update_notification_settings(user, *, email: str, email_questions: bool) -> None:
    """R-NT3: the address question emails go to, and whether they are sent at all."""
    user.email = email
    user.save(update_fields=["email"])
    NotificationSettings.objects.update_or_create(user=user, defaults={"email_questions": email_questions})


@transaction.atomic
def issue_token(user, name: str = "", lifetime: timedelta | None = None) -> tuple[ApiToken, str]:
    """A new API token of `user` and its key, which is shown once and stored only hashed; it
    expires after `lifetime` (None: never). Without a name it gets one ("Token N"); a name one of
    the user's active tokens has is refused (TOKEN_NAME_TAKEN, 409)."""
    lock_user(user)  # one issue at a time per user: two requests cannot both take a name
    name = name.strip()
    if name and tokens_of(user).active().filter(name=name).exists():
        raise Conflict(
            "TOKEN_NAME_TAKEN", f"you already have an active token named {name!r}; choose another name or revoke it"
        )
    expires_at = timezone.now() + lifetime if lifetime is not None else None
    return ApiToken.issue(user, name=name, expires_at=expires_at)


def tokens_of(user) -> ApiTokenQuerySet:
    """A user's tokens, newest first, revoked and expired ones included (the settings page lists all)."""
    return ApiToken.objects.filter(user=user).order_by("-created_at")


@transaction.atomic
def revoke_tokens(tokens: QuerySet[ApiToken]) -> int:
    """Revoke these tokens; their open websockets and event streams close (R-FS3). The number revoked."""
    ids = list(tokens.filter(revoked_at__isnull=True).values_list("pk", flat=True))
    ApiToken.objects.filter(pk__in=ids).update(revoked_at=timezone.now())
    end_connections(token_ids=ids)
    return len(ids)


def revoke_own_token(user, token_id: str) -> None:
    """Revoke one of `user`'s active tokens (the settings page); NotFound for any other."""
    if not revoke_tokens(with_id(tokens_of(user), token_id)):
        raise NotFound("TOKEN_NOT_FOUND", f"no active token {token_id}")
