"""What choosing the next turns costs as the backlog grows (R-SC1), in-process, against either database.

    .venv/bin/python -m bench.dispatchcost [--database-url postgres://…] [--backlogs 0,1000,10000] [--owners 200]
                                           [--repeat 200] [--explain]

For each backlog, a throwaway database (a throwaway PostgreSQL database with --database-url)
gets that many queued runs of `--owners` users (bulk-created, then each owner's place in the
dispatch order set through the service), while 15 of the 16 slots are held by 5 other users.
Then it times `next_turns` for the free slot, `dispatch_queued_runs` (the task queue stubbed out,
offers not written, so each call sees the same queue) and `may_take_slot` for the run next in turn,
and counts their statements. `--explain` prints the query plan of each statement a dispatch
runs at the largest backlog.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable

CAP = 16
USER_CAP = 3
HOLDERS = 5  # 5 users hold 3 slots each: 15 of 16 held, the usual state when one frees up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dispatchcost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database-url", default="")
    parser.add_argument("--backlogs", default="0,1000,10000")
    parser.add_argument("--owners", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args(argv)
    backlogs = [int(n) for n in args.backlogs.split(",")]

    from .inprocess import explain, throwaway_service

    settings = {"SKILLRUNNER_MAX_CONCURRENT_TURNS": str(CAP), "SKILLRUNNER_USER_MAX_RUNNING": str(USER_CAP)}
    with throwaway_service("dispatchcost", args.database_url, lambda root: settings) as database_url:
        print(
            f"{'PostgreSQL' if database_url else 'SQLite'}; {CAP} slots, {CAP - 1} held by {HOLDERS} users; "
            f"ms median (p90) of {args.repeat}; statements per call"
        )
        print(f"{'queued':>7}  {'next_turns':>18}  {'dispatch_queued_runs':>20}  {'may_take_slot':>18}")
        for backlog in backlogs:
            _seed(backlog, args.owners)
            print(f"{backlog:>7}  " + "  ".join(_measure(args.repeat)))
        if args.explain:
            from runs.services.dispatching import dispatch_queued_runs

            explain(dispatch_queued_runs)
    return 0


def _seed(backlog: int, owners: int) -> None:
    """`backlog` queued runs of `owners` users, and the slots held: from scratch."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    import runs.services.dispatching
    import runs.task_queue
    from runs.models import OwnerQueue, Run, RunStatus
    from tests.support.backlog import bulk_runs

    runs.task_queue.enqueue_turn = lambda request_id, attempt: None
    # Offers are not written: each call sees the same queue.
    runs.services.dispatching._take_offer = lambda request_id, offered_at: True
    User = get_user_model()
    Run.objects.all().delete()
    OwnerQueue.objects.all().delete()
    waiting = [User.objects.get_or_create(username=f"queued-{n}")[0] for n in range(owners)]
    holders = [User.objects.get_or_create(username=f"holder-{n}")[0] for n in range(HOLDERS)]
    bulk_runs(holders, CAP - 1, status=RunStatus.RUNNING, holds_slot=True)
    bulk_runs(random.Random(backlog).sample(waiting, owners), backlog)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # what autovacuum would have done by now


def _measure(repeat: int) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.models import Run
    from runs.services.dispatching import dispatch_queued_runs, dispatch_state, may_take_slot, next_turns

    turns = next_turns(dispatch_state())
    if not turns:
        calls: list[Callable[[], object]] = [lambda: next_turns(dispatch_state()), dispatch_queued_runs]
    else:
        first = Run.objects.get(pk=turns[0].request_id)
        calls = [lambda: next_turns(dispatch_state()), dispatch_queued_runs, lambda: may_take_slot(first)]
    cells = []
    for call in calls:
        call()  # warm: statements prepared, pages cached
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            call()
            times.append((time.perf_counter() - began) * 1000)
        with CaptureQueriesContext(connection) as queries:
            call()
        p90 = statistics.quantiles(times, n=10)[-1]
        cells.append(f"{statistics.median(times):6.2f} ({p90:6.2f}) {len(queries):3}")
    return [f"{cell:>18}" for cell in cells] + ([f"{'no queued run':>18}"] if len(calls) < 3 else [])


if __name__ == "__main__":
    sys.exit(main())
