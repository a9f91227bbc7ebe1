"""Querysets run often whose SQL never changes, compiled once per database connection; and
`one_or_none`, a unique key's row without the ordering `.first()` compiles in.

For a statement of several subqueries Django's building and compiling costs milliseconds, many
times what the database takes to run it. A `CompiledQuery` builds and compiles its queryset at
the first run on a connection (for each set of arguments of its builder) and after that only
executes the SQL, converting the rows as the queryset would. Its parameters are compiled in, so
the builder's queryset must take nothing from the clock or the request: what varies is an
argument, which is part of the key.

Each thread's connection has its own compilers (a compiler converts with the connection it was
made for), kept on the connection object itself: they and the backend's converters refer back to
it, so a cache beside it (a WeakKeyDictionary) would keep every thread's connection alive. On the
connection, they go with it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet
from django.db.models.sql.compiler import SQLCompiler

_ON_CONNECTION = "kernel_compiled_queries"


def one_or_none(queryset: QuerySet[Any, Any]) -> Any:
    """The one row `queryset` (filtered on a unique key) matches, or None.

    `.first()` orders an unordered queryset by its primary key, and Django resolves and compiles
    that ORDER BY at every call: 0.1-0.4 ms of CPU for a row the key alone decides (the most
    with select_related), on each turn's claim and end and each run's creation."""
    return next(iter(queryset[:1]), None)


class _Compiled(NamedTuple):
    compiler: SQLCompiler
    sql: str
    params: tuple[Any, ...]
    converters: dict[int, Any]  # {column: (converters, expression)}, as SQLCompiler.get_converters
    names: list[str]  # the columns' names


class CompiledQuery:
    """The queryset `build(*key)` returns, compiled once per connection and `key`."""

    def __init__(self, build: Callable[..., QuerySet[Any, Any]]) -> None:
        self.build = build

    def rows(self, *key: Hashable) -> list[list[Any]]:
        """Its rows, each a list of its columns' values converted as the queryset would."""
        _, rows = self._run(key)
        return rows

    def named_rows(self, *key: Hashable) -> list[dict[str, Any]]:
        """Its rows, each by its columns' names."""
        compiled, rows = self._run(key)
        return [dict(zip(compiled.names, row, strict=True)) for row in rows]

    def _run(self, key: tuple[Hashable, ...]) -> tuple[_Compiled, list[list[Any]]]:
        database = connections[DEFAULT_DB_ALIAS]  # this thread's own, not the proxy
        compiled = self._compiled(database, key)
        with database.cursor() as cursor:
            cursor.execute(compiled.sql, compiled.params)
            fetched = cursor.fetchall()
        return compiled, list(compiled.compiler.apply_converters(fetched, compiled.converters))

    def _compiled(self, database: BaseDatabaseWrapper, key: tuple[Hashable, ...]) -> _Compiled:
        known: dict[tuple[CompiledQuery, tuple[Hashable, ...]], _Compiled] = vars(database).setdefault(
            _ON_CONNECTION, {}
        )
        if (self, key) not in known:
            compiler = self.build(*key).query.get_compiler(connection=database)
            sql, params = compiler.as_sql()
            columns = compiler.select[: compiler.col_count]
            converters = compiler.get_converters([expression for expression, _, _ in columns])
            names = [name for _, _, name in columns]
            known[self, key] = _Compiled(compiler, sql, tuple(params), converters, names)
        return known[self, key]
