"""Counter rows that only grow (a user's tokens of the day, a histogram bucket), written by many
processes at once: one statement that makes the row or adds to it."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from django.db import connections, models, router

from .compiled import WrittenInsert


class _Upsert(NamedTuple):
    sql: str
    fields: tuple[models.Field[Any, Any], ...]  # in the order of the statement's parameters


def add_to_row(model: type[models.Model], key: dict[str, Any], **amounts: int) -> None:
    """Add `amounts` to the fields of `model`'s row identified by `key` (the fields of a unique
    constraint), creating the row with them when there is none.

    An insert that adds to the row it conflicts with (SQLite and PostgreSQL alike): never an
    IntegrityError to recover from when another process made the row meanwhile, and written out
    here because Django spent more time building its update (and, for a new row, its insert) than
    the database took to run them."""
    connection = connections[router.db_for_write(model)]
    upsert = _upsert(model, tuple(key), tuple(amounts), connection.alias)
    values = (*key.values(), *amounts.values())
    params = [field.get_db_prep_save(value, connection) for field, value in zip(upsert.fields, values, strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(upsert.sql, params)


@functools.cache
def _upsert(model: type[models.Model], key: tuple[str, ...], amounts: tuple[str, ...], alias: str) -> _Upsert:
    """add_to_row's statement for these fields, built once per process (a handful of callers): the
    row's insert, written out as WrittenInsert writes it, adding to the row it conflicts with."""
    quote = connections[alias].ops.quote_name
    insert = WrittenInsert(model, *key, *amounts)
    columns = [quote(field.column) for field in insert.fields]
    table = quote(model._meta.db_table)
    added = ", ".join(f"{column} = {table}.{column} + excluded.{column}" for column in columns[len(key) :])
    sql = f"{insert.into}{insert.row} ON CONFLICT ({', '.join(columns[: len(key)])}) DO UPDATE SET {added}"
    return _Upsert(sql, insert.fields)
