"""Where rate-limit and failed-login counters live (issue #16): in the web process's memory on the
embedded default, which has one web process; in the database on PostgreSQL without Redis, where
web processes may be several; in Redis when there is one."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.jobs import create_job
from tests.support.settings_probe import run_with_production_settings

PROBE = "import django; django.setup(); from django.conf import settings; print(settings.CACHES['default']['BACKEND'])"


@pytest.mark.parametrize(
    ("database_url", "redis_url", "backend"),
    [
        ("", "", "django.core.cache.backends.locmem.LocMemCache"),
        ("postgres://u@127.0.0.1:5432/db", "", "django.core.cache.backends.db.DatabaseCache"),
        ("postgres://u@127.0.0.1:5432/db", "redis://127.0.0.1:6379/0", "django.core.cache.backends.redis.RedisCache"),
    ],
)
def test_the_counters_are_shared_by_every_process_that_serves_requests(tmp_path, database_url, redis_url, backend):
    done = run_with_production_settings(PROBE, tmp_path, DATABASE_URL=database_url, REDIS_URL=redis_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == backend


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded default's own storage")
def test_creating_a_run_on_the_embedded_default_writes_no_counter_to_the_database(api, install_skill, manual_dispatch):
    install_skill("haiku-writer")
    with CaptureQueriesContext(connection) as statements:
        create_job(api)
    tables = " ".join(statement["sql"] for statement in statements)
    assert "runs_run" in tables  # the run was saved by these statements…
    assert "skillrunner_cache" not in tables  # …and its rate-limit count was not
