"""Querysets run often, compiled once per database connection: `CompiledQuery` for a statement
whose SQL never changes, `PreparedQuery` for one whose values do (a run's id, a skill's name);
and `one_or_none`, a unique key's row without the ordering `.first()` compiles in.

For a statement of several subqueries Django's building and compiling costs milliseconds, many
times what the database takes to run it; for a run's row with its skill, half a millisecond, on
every turn. A `CompiledQuery` builds and compiles its queryset at the first run on a connection
(for each set of arguments of its builder) and after that only executes the SQL, converting the
rows as the queryset would. Its parameters are compiled in, so the builder's queryset must take
nothing from the clock or the request: what varies is an argument, which is part of the key.
A `PreparedQuery` leaves the values of the fields it names to each call instead.

Each thread's connection has its own compilers (a compiler converts with the connection it was
made for), kept on the connection object itself: they and the backend's converters refer back to
it, so a cache beside it (a WeakKeyDictionary) would keep every thread's connection alive. On the
connection, they go with it.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, ForeignObject, QuerySet
from django.db.models.query import get_related_populators
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
        return compiled, _fetch(database, compiled, compiled.params)

    def _compiled(self, database: BaseDatabaseWrapper, key: tuple[Hashable, ...]) -> _Compiled:
        known = _known(database)
        if (self, key) not in known:
            known[self, key] = _compile(self.build(*key), database)
        return known[self, key]


class PreparedQuery:
    """The queryset `build(*key, *markers)` returns, compiled once per connection and `key`, run
    with each call's values where the markers were: one value per field of `fields`, the field
    whose column a marker is compared with (=, <, >; not a pattern), as in
    `build=lambda pk: Run.objects.filter(pk=pk)` with `fields=(Run._meta.pk,)`. The key, as
    CompiledQuery's, is what shapes the statement.

    It is built twice, each time with markers of its own (values no statement holds by chance);
    the parameters that differ between the two are the markers', everything else is the same in
    every run. A statement whose shape depends on the values (None, which compiles to IS NULL; a
    slice's LIMIT) is not one statement: such values are part of the key. A builder that takes
    something else from the clock or the request is refused at its first run."""

    def __init__(self, build: Callable[..., QuerySet[Any, Any]], *fields: Field[Any, Any]) -> None:
        self.build = build
        self.fields = fields

    def rows(self, *values: Any, key: tuple[Hashable, ...] = ()) -> list[list[Any]]:
        """Its rows, each a list of its columns' values converted as the queryset would."""
        _, rows = self._run(values, key)
        return rows

    def instances(self, *values: Any, key: tuple[Hashable, ...] = ()) -> list[Any]:
        """Its rows as the queryset gives them: model instances, with those of its select_related
        in place."""
        prepared, rows = self._run(values, key)
        layout = prepared.layout
        if layout is None:
            raise TypeError(f"{self.build!r}: its rows are values, not model instances (use rows())")
        instances = []
        for row in rows:
            instance = layout.model.from_db(DEFAULT_DB_ALIAS, layout.names, row[layout.start : layout.end])
            for populator in layout.related:
                populator.populate(row, instance)
            instances.append(instance)
        return instances

    def one(self, *values: Any, key: tuple[Hashable, ...] = ()) -> Any:
        """Its first instance, or None: for a queryset sliced to one row."""
        return next(iter(self.instances(*values, key=key)), None)

    def _run(self, values: Sequence[Any], key: tuple[Hashable, ...]) -> tuple[_Prepared, list[list[Any]]]:
        database = connections[DEFAULT_DB_ALIAS]  # this thread's own, not the proxy
        known = _known(database)
        if (self, key) not in known:
            known[self, key] = self._prepare(database, key)
        prepared: _Prepared = known[self, key]
        params = list(prepared.compiled.params)
        for field, value, positions in zip(self.fields, values, prepared.positions, strict=True):
            if value is None:  # the queryset would compare with IS NULL, a statement of its own
                raise ValueError(f"{self.build!r}: None for {field}")
            for position in positions:
                params[position] = field.get_db_prep_value(value, database, prepared=False)
        return prepared, _fetch(database, prepared.compiled, params)

    def _prepare(self, database: BaseDatabaseWrapper, key: tuple[Hashable, ...]) -> _Prepared:
        markers = [[_marker(field) for field in self.fields] for _ in range(2)]
        first, second = (_compile(self.build(*key, *values), database) for values in markers)
        if first.sql != second.sql or len(first.params) != len(second.params):
            raise ValueError(f"{self.build!r}: its statement's shape depends on the values")
        as_params = [
            [
                field.get_db_prep_value(value, database, prepared=False)
                for field, value in zip(self.fields, values, strict=True)
            ]
            for values in markers
        ]
        pairs = list(enumerate(zip(first.params, second.params, strict=True)))
        positions = [
            [index for index, (one, other) in pairs if one == as_params[0][number] and other == as_params[1][number]]
            for number in range(len(self.fields))
        ]
        varying = {index for index, (one, other) in pairs if one != other}
        if not all(positions) or varying != {index for found in positions for index in found}:
            raise ValueError(f"{self.build!r}: its statement holds more than the markers' values, or not each")
        return _Prepared(first, positions, _layout(first.compiler))


class _Layout(NamedTuple):
    """Where a row's model and its select_related models are, as Django's ModelIterable reads them."""

    model: Any
    start: int
    end: int
    names: list[str]
    related: list[Any]  # RelatedPopulators, which keep no state between rows


class _Prepared(NamedTuple):
    compiled: _Compiled
    positions: list[list[int]]  # per field, where its value goes among the parameters
    layout: _Layout | None  # None: a values() or values_list() queryset


def _layout(compiler: SQLCompiler) -> _Layout | None:
    klass_info = compiler.klass_info
    if klass_info is None:
        return None
    start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
    names = [column.target.attname for column, _, _ in compiler.select[start:end]]
    # The stubs are Django 6's, where it also takes a fetch mode.
    related = get_related_populators(klass_info, compiler.select, DEFAULT_DB_ALIAS)  # type: ignore[call-arg]
    return _Layout(klass_info["model"], start, end, names, related)


def _known(database: BaseDatabaseWrapper) -> dict[Any, Any]:
    known: dict[Any, Any] = vars(database).setdefault(_ON_CONNECTION, {})
    return known


def _compile(queryset: QuerySet[Any, Any], database: BaseDatabaseWrapper) -> _Compiled:
    compiler = queryset.query.get_compiler(connection=database)
    sql, params = compiler.as_sql()
    columns = compiler.select[: compiler.col_count]
    converters = compiler.get_converters([expression for expression, _, _ in columns])
    names = [name for _, _, name in columns]
    return _Compiled(compiler, sql, tuple(params), converters, names)


def _fetch(database: BaseDatabaseWrapper, compiled: _Compiled, params: Sequence[Any]) -> list[list[Any]]:
    with database.cursor() as cursor:
        cursor.execute(compiled.sql, params)
        fetched = cursor.fetchall()
    return list(compiled.compiler.apply_converters(fetched, compiled.converters))


# Markers by the type of the column they go in; integers within every backend's 32-bit range.
_MARKERS: dict[str, Callable[[], Any]] = {
    "UUIDField": uuid.uuid4,
    "CharField": lambda: f"\ue000{uuid.uuid4().hex}",
    "TextField": lambda: f"\ue000{uuid.uuid4().hex}",
    "DateTimeField": lambda: datetime(2999, 1, 1, tzinfo=UTC) + timedelta(microseconds=random.randrange(10**12)),
    **dict.fromkeys(
        ("AutoField", "BigAutoField", "IntegerField", "BigIntegerField", "PositiveIntegerField"),
        lambda: random.randrange(10**8, 2 * 10**9),
    ),
}


def _marker(field: Field[Any, Any]) -> Any:
    column = field.target_field if isinstance(field, ForeignObject) else field
    kind = column.get_internal_type()
    if kind not in _MARKERS:
        raise TypeError(f"no marker for a {kind} ({field})")
    return _MARKERS[kind]()
