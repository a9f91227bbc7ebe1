"""Looking rows up by an id a client sent."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet


def with_id(rows: QuerySet, row_id: Any) -> QuerySet:
    """`rows` narrowed to the integer primary key `row_id`, or none when it is not one."""
    key = str(row_id)
    # ASCII digits only: str.isdigit() also accepts "²", which int() and the database refuse.
    return rows.filter(pk=int(key)) if key.isascii() and key.isdigit() else rows.none()
