"""History at scale (#16): request times of the list, page, history and admin views on a database
that `manage.py seed_history` filled (100,000 runs and 5,000,000 events by default).

    DATABASE_URL=postgres://…/history SKILLRUNNER_DATA_DIR=… python manage.py seed_history
    DATABASE_URL=postgres://…/history SKILLRUNNER_DATA_DIR=… python -m bench.history [--samples 30]

Each view is requested in-process through Django's test client (view, middleware, queries and
templates; no socket), as a staff user and as an owner of 1/20 of the runs; the table gives the
median and p90 in ms, and the query count of one request.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from functools import partial

import django


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--slowest", type=int, default=0, help="also list each view's N slowest queries")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skillrunner.settings")
    django.setup()
    from processes.startup import prepare_installation

    prepare_installation()  # the installation's secret key signs the sessions

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from runs.models import Run, RunEvent

    users = get_user_model().objects
    staff, _ = users.get_or_create(username="history-staff", defaults={"is_staff": True, "is_superuser": True})
    owner = users.get(username="seed-user-1")
    run = Run.objects.filter(owner=owner).order_by("-created_at")[500]
    oldest = Run.objects.filter(owner=owner).order_by("created_at").first()
    assert oldest is not None
    staff_client, owner_client = Client(), Client()
    staff_client.force_login(staff)
    owner_client.force_login(owner)
    views = [
        ("GET /v1/jobs (owner, first page)", owner_client, "/v1/jobs"),
        ("GET /v1/jobs (staff, all runs)", staff_client, "/v1/jobs"),
        ("GET /v1/jobs?status=failed (owner)", owner_client, "/v1/jobs?status=failed"),
        ("GET /v1/jobs/{id}", owner_client, f"/v1/jobs/{run.pk}"),
        ("GET /v1/jobs/{id}/events/history", owner_client, f"/v1/jobs/{run.pk}/events/history?after_seq=0"),
        ("run list page", owner_client, "/"),
        ("run page", owner_client, f"/runs/{run.pk}/"),
        ("run page, oldest run", owner_client, f"/runs/{oldest.pk}/"),
        ("admin: runs", staff_client, "/admin/runs/run/"),
        ("admin: runs, status filter", staff_client, "/admin/runs/run/?status__exact=failed"),
        ("admin: one run", staff_client, f"/admin/runs/run/{run.pk}/change/"),
        ("admin: events", staff_client, "/admin/runs/runevent/"),
        ("admin: interactions", staff_client, "/admin/runs/interaction/"),
    ]
    print(f"{Run.objects.count():,} runs, {RunEvent.objects.count():,} events ({connection.vendor})\n")
    print("| view | median ms | p90 ms | queries |\n|---|---|---|---|")
    for label, client, path in views:
        queries: list[tuple[float, str]] = []
        with connection.execute_wrapper(partial(_timed, queries)):
            first = client.get(path)
        if first.status_code != 200:
            raise SystemExit(f"{path} answered {first.status_code}")
        times = []
        for _ in range(args.samples):
            began = time.perf_counter()
            client.get(path)
            times.append((time.perf_counter() - began) * 1000)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"| {label} | {statistics.median(times):.1f} | {p90:.1f} | {len(queries)} |")
        if args.slowest:
            for took, sql in sorted(queries, reverse=True)[: args.slowest]:
                print(f"|  | {took:.1f} ms: `{sql[:300]}` | | |")
    return 0


def _timed(log: list[tuple[float, str]], execute, sql, params, many, context):
    """A database execute wrapper: each query's time in ms, with its SQL."""
    began = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        log.append(((time.perf_counter() - began) * 1000, sql))


if __name__ == "__main__":
    raise SystemExit(main())
