"""Querysets run often, compiled once per process: `CompiledQuery` for a statement whose SQL never
changes, `PreparedQuery` for one whose values do (a run's id, a skill's name); `one_or_none`, a
unique key's row without the ordering `.first()` compiles in; `WrittenInsert`, rows inserted
by a statement written out once; and `WrittenUpdate`, a row's fields written the same way.

For a statement of several subqueries Django's building and compiling costs milliseconds, many
times what the database takes to run it; for a run's row with its skill, half a millisecond, on
every turn. A `CompiledQuery` builds and compiles its queryset at its first run (for each set of
arguments of its builder) and after that only executes the SQL, converting the rows as the
queryset would. Its parameters are compiled in, so the builder's queryset must take nothing from
the clock or the request: what varies is an argument, which is part of the key. A `PreparedQuery`
leaves the values of the fields it names to each call instead.

What a queryset compiles to (its SQL, its columns, where a row's models are) is the same on every
connection of the process and refers to none, so the CompiledQuery or PreparedQuery keeps it:
compiled once, not once per thread. Each slot's and request's thread used to compile its own:
after a 50-run burst at cap 16 the task process held 2.3 MiB of Django's query objects for its 16
connections and the web 0.9 MiB for its threads (tracemalloc), and the CPU of every compile.
Converting a row is the one thing a connection does its own way (the backend's converters are its
methods): a compiler made for it and its converters are kept on the connection object itself,
which they refer back to, so a cache beside it (a WeakKeyDictionary) would keep every thread's
connection alive. On the connection, they go with it.
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
from django.db.models.sql import Query
from django.db.models.sql.compiler import SQLCompiler

_ON_CONNECTION = "kernel_compiled_queries"


def one_or_none(queryset: QuerySet[Any, Any]) -> Any:
    """The one row `queryset` (filtered on a unique key) matches, or None.

    `.first()` orders an unordered queryset by its primary key, and Django resolves and compiles
    that ORDER BY at every call: 0.1-0.4 ms of CPU for a row the key alone decides (the most
    with select_related), on each turn's claim and end and each run's creation."""
    return next(iter(queryset[:1]), None)


class _Layout(NamedTuple):
    """Where a row's model and its select_related models are, as Django's ModelIterable reads them."""

    model: Any
    start: int
    end: int
    names: list[str]
    related: list[Any]  # RelatedPopulators, which keep no state between rows


class _Shape(NamedTuple):
    """A queryset compiled, the same on every connection of the process."""

    query: Query
    columns: list[Any]  # the selected expressions, converted as each connection converts them
    sql: str
    params: tuple[Any, ...]
    names: list[str]  # the columns' names


class Converting(NamedTuple):
    """How one connection converts a shape's rows (SQLCompiler.apply_converters, with the
    converters SQLCompiler.get_converters finds: {column: (converters, expression)})."""

    compiler: SQLCompiler
    converters: dict[int, Any]

    def convert(self, rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
        return list(self.compiler.apply_converters(rows, self.converters))


class CompiledQuery:
    """The queryset `build(*key)` returns, compiled once per process and `key`."""

    def __init__(self, build: Callable[..., QuerySet[Any, Any]]) -> None:
        self.build = build
        self._shapes: dict[tuple[Hashable, ...], _Shape] = {}

    def rows(self, *key: Hashable) -> list[list[Any]]:
        """Its rows, each a list of its columns' values converted as the queryset would."""
        _, rows = self._run(key)
        return rows

    def named_rows(self, *key: Hashable) -> list[dict[str, Any]]:
        """Its rows, each by its columns' names."""
        shape, rows = self._run(key)
        return [dict(zip(shape.names, row, strict=True)) for row in rows]

    def _run(self, key: tuple[Hashable, ...]) -> tuple[_Shape, list[list[Any]]]:
        database = connections[DEFAULT_DB_ALIAS]  # this thread's own, not the proxy
        shape = self._shape(database, key)
        return shape, _fetch(database, (self, key), shape, shape.params)

    def _shape(self, database: BaseDatabaseWrapper, key: tuple[Hashable, ...]) -> _Shape:
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes.setdefault(key, _compile(self.build(*key), database)[0])
        return shape


class PreparedQuery:
    """The queryset `build(*key, *markers)` returns, compiled once per process and `key`, run
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
        self._prepared: dict[tuple[Hashable, ...], _Prepared] = {}

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
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared.setdefault(key, self._prepare(database, key))
        shape = prepared.shape
        params = list(shape.params)
        for field, value, positions in zip(self.fields, values, prepared.positions, strict=True):
            if value is None:  # the queryset would compare with IS NULL, a statement of its own
                raise ValueError(f"{self.build!r}: None for {field}")
            for position in positions:
                params[position] = field.get_db_prep_value(value, database, prepared=False)
        return prepared, _fetch(database, (self, key), shape, params)

    def _prepare(self, database: BaseDatabaseWrapper, key: tuple[Hashable, ...]) -> _Prepared:
        markers = [[_marker(field) for field in self.fields] for _ in range(2)]
        (first, compiler), (second, _) = (_compile(self.build(*key, *values), database) for values in markers)
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
        return _Prepared(first, positions, _layout(compiler))


class _Prepared(NamedTuple):
    shape: _Shape  # compiled with the first markers, which each call's values replace
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


def _compile(queryset: QuerySet[Any, Any], database: BaseDatabaseWrapper) -> tuple[_Shape, SQLCompiler]:
    """The queryset's shape, and the compiler that made it (which refers to the connection)."""
    compiler = queryset.query.get_compiler(connection=database)
    sql, params = compiler.as_sql()
    columns = compiler.select[: compiler.col_count]
    expressions = [expression for expression, _, _ in columns]
    names = [name for _, _, name in columns]
    return _Shape(queryset.query, expressions, sql, tuple(params), names), compiler


def converting(database: BaseDatabaseWrapper, owner: Hashable, query: Query, columns: Sequence[Any]) -> Converting:
    """How `database` converts the values of `columns` selected by `query`, worked out once per
    connection and kept on it under `owner` (whoever reads them: a compiled query and its key,
    the status read)."""
    known: dict[Any, Converting] = vars(database).setdefault(_ON_CONNECTION, {})
    found = known.get(owner)
    if found is None:
        compiler = query.get_compiler(connection=database)
        found = known[owner] = Converting(compiler, compiler.get_converters(columns))
    return found


def _fetch(database: BaseDatabaseWrapper, owner: Hashable, shape: _Shape, params: Sequence[Any]) -> list[list[Any]]:
    """`shape`'s rows with `params`, converted as this connection converts them (`owner`: the
    query and key it was compiled for)."""
    converts = converting(database, owner, shape.query, shape.columns)
    return converts.convert(_execute(database, shape, params))


def _execute(database: BaseDatabaseWrapper, shape: _Shape, params: Sequence[Any]) -> list[Sequence[Any]]:
    with database.cursor() as cursor:
        cursor.execute(shape.sql, params)
        return cursor.fetchall()


class WrittenInsert:
    """INSERTs of `model`'s rows into the columns of the fields `names`, written out: one statement
    for any number of rows, each value prepared by its field as Model.save prepares it (pre_save:
    an auto_now_add time is each row's own, set on the object). Django built an INSERT in longer
    than the database runs it (issue #43). The rows' ids are not read back, and no signal is sent:
    for rows nobody reads back by id, whose writer says what it saved in its own way."""

    def __init__(self, model: type[Any], *names: str) -> None:
        quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
        self.fields, columns = zip(*(field_and_column(model, name) for name in names), strict=True)
        self.into = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) VALUES "
        self.row = f"({', '.join(['%s'] * len(names))})"

    def insert(self, objects: Sequence[Any]) -> None:
        if not objects:  # VALUES with no row is no statement
            return
        database = connections[DEFAULT_DB_ALIAS]
        values = [
            field.get_db_prep_save(field.pre_save(instance, add=True), database)
            for instance in objects
            for field in self.fields
        ]
        with database.cursor() as cursor:
            cursor.execute(self.into + ", ".join([self.row] * len(objects)), values)


class WrittenUpdate:
    """UPDATEs of `model` rows written out: the row of a primary key, and where `conditions` names
    fields, only while they hold the values given (none of them None). For each set of fields a
    statement written once, each value prepared by its field as Model.save prepares it. Django
    built and compiled a run's UPDATE on each save, four times a turn: 0.25 ms of CPU where the
    database takes a tenth of that (issue #43). Like WrittenInsert it sends no signal: for a model
    whose saves nobody listens to."""

    def __init__(self, model: type[Any], *conditions: str) -> None:
        self.model = model
        self._keys, self._key_columns = zip(
            *(field_and_column(model, name) for name in (model._meta.pk.name, *conditions)), strict=True
        )
        self._statements: dict[tuple[str, ...], tuple[str, tuple[Field[Any, Any], ...]]] = {}

    def update(self, instance: Any, names: Sequence[str]) -> int:
        """Write `names` (fields' names or attnames) of `instance` to its row, pre_save included (an
        auto_now time is set on the object); returns the rows changed."""
        database = connections[DEFAULT_DB_ALIAS]
        sql, fields = self._statement(tuple(names))
        values = [field.get_db_prep_save(field.pre_save(instance, add=False), database) for field in fields]
        return self._execute(database, sql, values, [getattr(instance, key.attname) for key in self._keys])

    def set(self, keys: Sequence[Any], **values: Any) -> int:
        """Set `values` (by field name) on the row whose primary key and conditions are `keys`, in
        their order; returns the rows changed."""
        database = connections[DEFAULT_DB_ALIAS]
        sql, fields = self._statement(tuple(values))
        prepared = [
            field.get_db_prep_save(value, database) for field, value in zip(fields, values.values(), strict=True)
        ]
        return self._execute(database, sql, prepared, keys)

    def _execute(self, database: BaseDatabaseWrapper, sql: str, values: list[Any], keys: Sequence[Any]) -> int:
        values += [key.get_db_prep_value(value, database) for key, value in zip(self._keys, keys, strict=True)]
        with database.cursor() as cursor:
            cursor.execute(sql, values)
            return cursor.rowcount

    def _statement(self, names: tuple[str, ...]) -> tuple[str, tuple[Field[Any, Any], ...]]:
        found = self._statements.get(names)
        if found is None:
            quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
            fields, columns = zip(*(field_and_column(self.model, name) for name in names), strict=True)
            assignments = ", ".join(f"{quote(column)} = %s" for column in columns)
            where = " AND ".join(f"{quote(column)} = %s" for column in self._key_columns)
            statement = f"UPDATE {quote(self.model._meta.db_table)} SET {assignments} WHERE {where}"
            found = self._statements.setdefault(names, (statement, fields))
        return found


def field_and_column(model: type[Any], name: str) -> tuple[Field[Any, Any], str]:
    """`model`'s field `name` and its column, for a statement written out; TypeError for a name
    that is no column (a reverse relation, a many-to-many)."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or not field.column:
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field, field.column


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
