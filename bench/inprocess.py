"""The service's code set up in this process for a profile or micro-benchmark (bench.turnprofile,
bench.dispatchcost): a throwaway data directory and database, migrated, the bundled skills
installed, the worker's connection settings; all removed when done."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def throwaway_service(
    name: str, base_database_url: str, env: Callable[[Path], dict[str, str]] = lambda root: {}
) -> Iterator[str]:
    """Django set up on SQLite, or on a new database of the PostgreSQL server of
    `base_database_url` when given; `env(root)` adds settings (files it writes go under `root`).
    Yields the database's URL, "" for SQLite."""
    from tests.support.service_processes import drop_postgres_database, fresh_postgres_url

    root = Path(tempfile.mkdtemp(prefix=f"skillrunner-{name}-"))
    database_url = fresh_postgres_url(base_database_url) if base_database_url else ""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="skillrunner.settings",
        SKILLRUNNER_DATA_DIR=str(root / "data"),
        SECRET_KEY=name,
        DATABASE_URL=database_url,
        **env(root),
    )
    sys.argv[1:] = ["worker"]  # the worker's connection settings (persistent connections)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        from processes.startup import prepare_installation

        prepare_installation()  # the data dir, as `serve` and `worker` make it
        call_command("migrate", verbosity=0)
        call_command("createcachetable", verbosity=0)  # as `serve` does: PostgreSQL without Redis keeps its cache there
        call_command("load_skills", verbosity=0)
        yield database_url
    finally:
        from django.db import connections

        connections.close_all()
        if database_url:
            drop_postgres_database(database_url)
        shutil.rmtree(root, ignore_errors=True)


def explain(call: Callable[[], Any]) -> None:
    """Print each statement `call()` runs with its query plan."""
    from django.db import connection

    statements: list[tuple[str, Any]] = []

    def record(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        call()
    prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    for sql, params in statements:
        print(f"\n{sql}")
        with connection.cursor() as cursor:
            cursor.execute(prefix + sql, params)
            for row in cursor.fetchall():
                print("   ", row[-1])
