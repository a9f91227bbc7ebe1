"""What a process that serves no HTTP imports at start: every worker, `manage.py` command and
cluster process runs every app's `ready()`. The API's libraries (DRF's serializers, and through
them django.contrib.postgres and requests) and redis-py on the embedded default cost each such
process a third of its start-up, for nothing it uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What `manage.py worker` imports to run turns and deliveries, beyond django.setup().
WORKER_MODULES = ("worker.management.commands.worker", "worker.tasks", "worker.execution", "notifications.tasks")
NOT_FOR_A_WORKER = ("rest_framework.serializers", "rest_framework.response", "redis")


def imported_by_a_worker(env: dict[str, str]) -> set[str]:
    script = (
        "import django, importlib, json, sys\n"
        "django.setup()\n"
        f"for name in {WORKER_MODULES!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout))


def test_a_worker_on_the_embedded_default_imports_neither_the_api_nor_redis(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="tests.settings", SKILLRUNNER_DATA_DIR=str(tmp_path))
    modules = imported_by_a_worker(env)
    assert "runs.services" in modules and "django_q.cluster" in modules  # the probe ran what a worker runs
    assert not modules & set(NOT_FOR_A_WORKER), sorted(modules & set(NOT_FOR_A_WORKER))
