"""What a process imports at start. Every worker, `manage.py` command and cluster process runs
every app's `ready()`; the API's libraries (DRF's serializers, and through them
django.contrib.postgres and requests) and redis-py on the embedded default cost each process that
serves no HTTP a third of its start-up, for nothing it uses, and the worker's system checks would
load every view and middleware again. A web on the embedded default has no use for redis-py, and
no `manage.py` process for what libraries import only because it is installed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What `manage.py worker` imports to run turns and deliveries, beyond django.setup().
WORKER_MODULES = ("worker.management.commands.worker", "worker.tasks", "worker.execution", "notifications.tasks")
NOT_FOR_A_WORKER = ("rest_framework.serializers", "rest_framework.response", "redis")


def embedded_default(data_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="tests.settings", SKILLRUNNER_DATA_DIR=str(data_dir))
    return env


def imported_after(start: str, env: dict[str, str]) -> set[str]:
    """The modules loaded once django.setup() and then `start` (Python source) have run."""
    script = f"import django, importlib, json, sys\ndjango.setup()\n{start}\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout))


def test_a_worker_on_the_embedded_default_imports_neither_the_api_nor_redis(tmp_path):
    modules = imported_after(
        f"for name in {WORKER_MODULES!r}: importlib.import_module(name)", embedded_default(tmp_path)
    )
    assert "runs.services" in modules and "django_q.pusher" in modules  # the probe ran what a worker runs
    assert not modules & set(NOT_FOR_A_WORKER), sorted(modules & set(NOT_FOR_A_WORKER))


def test_the_system_checks_a_worker_runs_leave_the_urlconf_alone(tmp_path):
    start = (  # as BaseCommand.execute() runs them
        "from django.core.management.base import ALL_CHECKS\n"
        "from worker.management.commands.worker import Command\n"
        "tags = Command.requires_system_checks\n"
        "Command().check(tags=None if tags == ALL_CHECKS else tags)\n"
    )
    modules = imported_after(start, embedded_default(tmp_path))
    assert "django.db.migrations.autodetector" in modules  # the checks ran (that of `makemigrations`)
    # The URLconf with every view, the API schema's views, and the web's middleware.
    assert not modules & {"skillrunner.urls", "drf_spectacular.views", "rest_framework.authentication"}


def test_a_web_on_the_embedded_default_imports_no_redis(tmp_path):
    start = "import skillrunner.asgi, skillrunner.urls, runs.api\n"
    modules = imported_after(start, embedded_default(tmp_path))
    assert "kernel.api_errors" in modules and "rest_framework.views" in modules  # the API is loaded
    assert "redis" not in modules


LEFT_OUT = ("psycopg", "requests", "click", "rich", "pygments", "OpenSSL", "cffi")


def printed_by_manage_py(probe: str, env: dict[str, str]) -> set[str]:
    """The words `probe` prints, run by `manage.py shell` once it has what `serve` imports before it
    forks."""
    prepare = (
        "from worker.management.commands.serve import import_what_the_service_runs\nimport_what_the_service_runs()\n"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", prepare + probe],
        cwd=REPO,
        env={**env, "SECRET_KEY": "startup-imports"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


def loaded_by_manage_py(env: dict[str, str]) -> set[str]:
    """Which of LEFT_OUT a `manage.py` command has loaded: DRF's serializers import
    django.contrib.postgres (so psycopg) and requests wherever they can be imported, httpx its
    command line (click, rich, pygments), Twisted OpenSSL, autobahn click and its native helpers
    (cffi)."""
    return printed_by_manage_py(
        f"import sys\nprint(' '.join(name for name in {LEFT_OUT!r} if sys.modules.get(name) is not None))", env
    )


def test_manage_py_leaves_out_what_is_imported_only_because_it_is_installed(tmp_path):
    """processes.startup.keep_unused_libraries_out: some 15 MiB of the heap `serve` shares with
    all its processes. No connection is made: the driver's import is what is looked at."""
    for name in LEFT_OUT:  # `make test` installs them all: what is left out is there to be imported
        assert importlib.util.find_spec(name) is not None, name
    assert loaded_by_manage_py(embedded_default(tmp_path)) == set()
    on_postgresql = {**embedded_default(tmp_path), "DATABASE_URL": "postgres://skillrunner@127.0.0.1:9/absent"}
    assert loaded_by_manage_py(on_postgresql) == {"psycopg"}


def test_serve_imports_before_it_forks_what_its_processes_use_first(tmp_path):
    """The channel layer, the task broker, the task functions and the sandbox's seccomp filter,
    which the web and the task process used to import (or build) at their first use, each into
    memory of its own: with Redis, 88 modules (channels_redis, redis-py, msgpack, cryptography's
    ciphers); pyseccomp and libseccomp. No connection is made."""
    sandboxed = {**embedded_default(tmp_path), "SKILLRUNNER_SANDBOX": "bwrap"}
    on_redis = {**sandboxed, "REDIS_URL": "redis://127.0.0.1:9/0"}
    first_use = (
        "import pydoc, sys\n"
        "before = set(sys.modules)\n"
        "from channels.layers import get_channel_layer\n"
        "from engines.seccomp import program\n"
        "from notifications.task_queue import DELIVERY_TASK, QUESTION_EMAIL_TASK\n"
        "from processes.queue_broker import this_process_broker\n"
        "from runs.task_queue import TURN_TASK\n"
        "layer, broker, built = get_channel_layer(), this_process_broker(), program.cache_info().currsize\n"
        "functions = [pydoc.locate(name) for name in (TURN_TASK, DELIVERY_TASK, QUESTION_EMAIL_TASK)]\n"
        "print(type(layer).__name__, type(broker).__name__, f'filters-built-{built}', *[f.__name__ for f in functions])\n"
        "print(*sorted(set(sys.modules) - before))\n"
    )
    tasks = {"execute_turn", "send_webhook", "email_question", "filters-built-1"}
    assert printed_by_manage_py(first_use, on_redis) == {
        "RedisChannelLayer",
        "Redis",
        *tasks,
    }  # and nothing imported since
    assert printed_by_manage_py(first_use, sandboxed) == {"InMemoryChannelLayer", "WakeableORM", *tasks}
