"""Counter rows that only grow (a user's tokens of the day, a histogram bucket), written by many
processes at once: one statement that makes the row or adds to it."""

from __future__ import annotations

from typing import Any

from django.db import connections, models, router


def add_to_row(model: type[models.Model], key: dict[str, Any], **amounts: int) -> None:
    """Add `amounts` to the fields of `model`'s row identified by `key` (the fields of a unique
    constraint), creating the row with them when there is none.

    An insert that adds to the row it conflicts with (SQLite and PostgreSQL alike): never an
    IntegrityError to recover from when another process made the row meanwhile, and written out
    here because Django spent more time building its update (and, for a new row, its insert) than
    the database took to run them."""
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    fields, columns = zip(*(_field_and_column(model, name) for name in (*key, *amounts)), strict=True)
    columns = tuple(quote(column) for column in columns)
    table = quote(model._meta.db_table)
    added = ", ".join(f"{column} = {table}.{column} + excluded.{column}" for column in columns[len(key) :])
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT ({', '.join(columns[: len(key)])}) DO UPDATE SET {added}"
    )
    values = (*key.values(), *amounts.values())
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [field.get_db_prep_save(value, connection) for field, value in zip(fields, values, strict=True)]
        )


def _field_and_column(model: type[models.Model], name: str) -> tuple[models.Field[Any, Any], str]:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field, field.column
