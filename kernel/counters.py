"""Counter rows that only grow (a user's tokens of the day, a histogram bucket), written by many
processes at once: one UPDATE when the row exists, which is every time but the first."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import F


def add_to_row(model: type[models.Model], key: dict[str, Any], **amounts: int) -> None:
    """Add `amounts` to the fields of `model`'s row identified by `key` (a unique constraint),
    creating the row with them when there is none."""
    increments = {field: F(field) + amount for field, amount in amounts.items()}
    if model._default_manager.filter(**key).update(**increments):
        return
    try:
        with transaction.atomic():
            model._default_manager.create(**key, **amounts)
    except IntegrityError:  # another process made the row meanwhile
        model._default_manager.filter(**key).update(**increments)
