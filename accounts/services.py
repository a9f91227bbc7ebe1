"""Changes to a user's account settings."""

from __future__ import annotations

from django.db import transaction

from .models import NotificationSettings


def email_questions_enabled(user) -> bool:
    preference = NotificationSettings.objects.filter(user=user).first()
    return preference is None or preference.email_questions


@transaction.atomic
def update_notification_settings(user, *, email: str, email_questions: bool) -> None:
    """R-NT3: the address question emails go to, and whether they are sent at all."""
    user.email = email
    user.save(update_fields=["email"])
    NotificationSettings.objects.update_or_create(user=user, defaults={"email_questions": email_questions})
