"""Changes to a user's account settings."""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

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


@transaction.atomic
def revoke_tokens(tokens: QuerySet[ApiToken]) -> int:
    """Revoke these tokens; their open websockets and event streams close (R-FS3). The number revoked."""
    ids = list(tokens.filter(revoked_at__isnull=True).values_list("pk", flat=True))
    ApiToken.objects.filter(pk__in=ids).update(revoked_at=timezone.now())
    end_connections(token_ids=ids)
    return len(ids)
