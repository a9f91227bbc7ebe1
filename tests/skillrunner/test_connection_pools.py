"""Who holds database connections (README "SKILLRUNNER_WEB_DB_CONNECTIONS"): the web process runs
requests on that many threads, which on PostgreSQL borrow from a pool with room for its other
threads too, `manage.py worker` keeps its own, `?conn_max_age=` keeps them everywhere, and a bad
size stops the service at start."""

from __future__ import annotations

import json
import subprocess

from tests.support.settings_probe import run_with_production_settings

PROBE = """
import json
import django
django.setup()
from django.db import connections
from worker.management.commands.worker import keep_database_connections
from skillrunner.asgi import django_asgi
default = connections["default"].settings_dict
web = {"pool": default["OPTIONS"].get("pool"), "conn_max_age": default["CONN_MAX_AGE"], "threads": django_asgi.threads.size}
keep_database_connections()
worker = {"pool": default["OPTIONS"].get("pool"), "conn_max_age": default["CONN_MAX_AGE"]}
print(json.dumps({"web": web, "worker": worker}))
"""


def _probe(tmp_path, database_url: str, **extra: str) -> subprocess.CompletedProcess:
    return run_with_production_settings(PROBE, tmp_path, DATABASE_URL=database_url, **extra)


def test_the_web_pools_its_connections_and_the_worker_keeps_its_own(tmp_path):
    done = _probe(tmp_path, "postgres://u@127.0.0.1:5432/db", SKILLRUNNER_WEB_DB_CONNECTIONS="7")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["web"] == {"pool": {"min_size": 2, "max_size": 11, "timeout": 3}, "conn_max_age": 0, "threads": 7}
    assert seen["worker"] == {"pool": None, "conn_max_age": 60}
    by_default = _probe(tmp_path, "postgres://u@127.0.0.1:5432/db")
    assert by_default.returncode == 0, by_default.stderr
    web = json.loads(by_default.stdout)["web"]
    assert (web["threads"], web["pool"]["max_size"]) == (4, 8)


def test_conn_max_age_in_the_url_keeps_connections_everywhere_without_a_pool(tmp_path):
    done = _probe(tmp_path, "postgres://u@127.0.0.1:5432/db?conn_max_age=30")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "web": {"pool": None, "conn_max_age": 30, "threads": 4},
        "worker": {"pool": None, "conn_max_age": 30},
    }


def test_on_sqlite_the_web_runs_requests_on_as_many_threads_each_keeping_its_connection(tmp_path):
    done = _probe(tmp_path, "", SKILLRUNNER_WEB_DB_CONNECTIONS="5")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["web"] == {"pool": None, "conn_max_age": 60, "threads": 5}
    by_default = _probe(tmp_path, "")
    assert by_default.returncode == 0, by_default.stderr
    assert json.loads(by_default.stdout)["web"]["threads"] == 4


def test_a_pool_of_no_connections_stops_the_service(tmp_path):
    done = _probe(tmp_path, "postgres://u@127.0.0.1:5432/db", SKILLRUNNER_WEB_DB_CONNECTIONS="0")
    assert done.returncode != 0
    assert "SKILLRUNNER_WEB_DB_CONNECTIONS must be a positive integer" in done.stderr
