"""Changes to a user's account settings."""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from kernel.errors import NotFound
from kernel.lookups import with_id

from .connections import end_connections
from .models import ApiToken, NotificationSettings


def email_questions_enabled(user) -> bool:
    preference = NotificationSettings.objects.filter(user=user).first()
    return preference is None or preference.email_questions


@transaction.atomic
def update_notification_settings(user, *, email: str, email_questions: bool) -> None:
    """R-NT3: the address question emails go to, and whether they are sent at all."""
    user.email = email
    user.save(update_fields=["email"])
    NotificationSettings.objects.update_or_create(user=user, defaults={"email_questions": email_questions})


def issue_token(user) -> tuple[ApiToken, str]:
    """A new API token of `user` and its key, which is shown once and stored only hashed."""
    return ApiToken.issue(user)


def tokens_of(user) -> QuerySet[ApiToken]:
    """A user's tokens, newest first, revoked ones included (the settings page lists both)."""
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
