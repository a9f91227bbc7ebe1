"""What one run costs beside a backlog (R-SC1): creating a run, dispatching on a slot release,
claiming a turn and a status GET, on an empty service and on one holding 10,000 queued runs of
200 users and 1,000 runs waiting for a person (`manage.py seed_backlog`).

    .venv/bin/python -m bench.backlog [--database-url postgres://… --redis-url redis://…]
                                      [--queued 10000 --waiting 1000 --users 200] [--repeat 200] [--json F]

In this process, on a throwaway database (a throwaway PostgreSQL database with --database-url,
and then the Redis broker and channel layer with --redis-url): the real code paths with their
real task queue, 16 slots of which 15 are held by 5 other users (the usual state when one frees
up). Creating and reading go through Django's test client with an API token (middleware, view,
serializer, queries; no socket). Each operation is timed `--repeat` times on the empty service,
then again once the backlog is seeded; a turn claimed is canceled and a run created is canceled
outside the timing, so each sample finds the same state. Medians, p90s and statements per call;
the ratio is loaded over empty (R-SC1: at most 1.2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CAP = 16
HOLDERS = 5  # hold 3 slots each: 15 of 16
WORKER = "bench:1:backlog"
OPERATIONS = ("create", "dispatch", "claim", "status")
WARMUP = 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.backlog", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--waiting", type=int, default=1_000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    from .inprocess import throwaway_service

    def settings(root: Path) -> dict[str, str]:
        return {
            "REDIS_URL": args.redis_url,
            "SKILLRUNNER_QUEUE_NAME": f"backlog-{time.monotonic_ns()}",
            "SKILLRUNNER_MAX_CONCURRENT_TURNS": str(CAP),
            "SKILLRUNNER_USER_MAX_RUNNING": "3",
            # The bench's own user creates thousands of runs in a minute, and the queue must hold the backlog.
            "SKILLRUNNER_MAX_QUEUED_RUNS": str(args.queued + 1_000),
            "SKILLRUNNER_RATE_RUN_CREATE": "1000000/min",
        }

    with throwaway_service("backlog", args.database_url, settings) as database_url:
        config = ("PostgreSQL" if database_url else "SQLite") + (" + Redis" if args.redis_url else "")
        bench = Bench()
        figures: dict[str, Any] = {"config": config, "empty": bench.measure(args.repeat)}
        from django.core.management import call_command

        call_command("seed_backlog", queued=args.queued, waiting=args.waiting, users=args.users, verbosity=0)
        bench.analyze()
        figures["loaded"] = bench.measure(args.repeat)
        figures["backlog"] = {"queued": args.queued, "waiting": args.waiting, "users": args.users}
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


class Bench:
    """The service in this process: 15 of 16 slots held, a user with a token, a run to read."""

    def __init__(self) -> None:
        from django.contrib.auth import get_user_model
        from django.test import Client

        from accounts.services import issue_token
        from runs.management.commands.seed_backlog import bulk_runs
        from skills.selectors import current_version

        User = get_user_model()
        version = current_version("haiku-writer")
        assert version is not None
        holders = [User.objects.create(username=f"holder-{n}") for n in range(HOLDERS)]
        bulk_runs(holders, CAP - 1, version, status="running", holds_slot=True)
        self.user = User.objects.create(username="bench")
        _, secret = issue_token(self.user)
        self.client = Client(HTTP_AUTHORIZATION=f"Token {secret}", HTTP_HOST="127.0.0.1")
        self.topics = iter(range(10**9))
        self.read = self.create()  # the run whose status is read

    def create(self) -> str:
        body = {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": f"backlog {next(self.topics)}"}}
        response = self.client.post("/v1/jobs", body, content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()["request_id"]

    def cancel(self, request_id: str) -> None:
        from runs.models import Run
        from runs.services import cancel_run

        cancel_run(Run.objects.get(pk=request_id))

    def analyze(self) -> None:
        from django.db import connection

        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")  # what autovacuum would have done by now

    def measure(self, repeat: int) -> dict[str, dict[str, float]]:
        from django_q.brokers import get_broker

        from runs.models import Run
        from runs.services import claim_turn, dispatch_queued_runs
        from runs.services.dispatching import Turn, dispatch_state, next_turns

        def next_turn() -> Turn:
            (turn,) = next_turns(dispatch_state())
            return turn

        def turn_to_claim() -> Turn:
            if not Run.objects.filter(status="queued").exclude(pk=self.read).exists():
                self.create()  # on the empty service, one run to claim
            return next_turn()

        def claim(turn: Turn) -> str:
            assert claim_turn(turn.request_id, turn.attempt_number, WORKER) is not None
            return str(turn.request_id)

        def offer_again() -> None:  # so that each dispatch offers the run next in turn
            Run.objects.filter(pk=next_turn().request_id).update(offered_at=None)

        results = {
            "create": timed(lambda _: self.create(), repeat, cleanup=self.cancel),
            "dispatch": timed(lambda _: dispatch_queued_runs(), repeat, prepare=offer_again),
            "claim": timed(claim, repeat, prepare=turn_to_claim, cleanup=self.cancel),
            "status": timed(lambda _: self.client.get(f"/v1/jobs/{self.read}"), repeat),
        }
        get_broker().purge_queue()  # the turns offered meanwhile
        return results


def timed(
    call: Callable[[Any], Any],
    repeat: int,
    *,
    prepare: Callable[[], Any] = lambda: None,
    cleanup: Callable[[Any], None] = lambda _: None,
) -> dict[str, float]:
    """Median and p90 in ms of `call(prepare())` after WARMUP untimed calls (statements prepared,
    caches filled: the empty service is measured first), and the statements one call runs;
    `cleanup` gets what each call returned, untimed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times = []
    for sample in range(WARMUP + repeat + 1):
        argument = prepare()
        began = time.perf_counter()
        if sample == WARMUP + repeat:
            with CaptureQueriesContext(connection) as statements:
                returned = call(argument)
        else:
            returned = call(argument)
        elapsed = (time.perf_counter() - began) * 1000
        cleanup(returned)
        if WARMUP <= sample < WARMUP + repeat:
            times.append(elapsed)
    return {
        "median_ms": statistics.median(times),
        "p90_ms": statistics.quantiles(times, n=10)[-1],
        "statements": len(statements),
    }


def table(figures: dict[str, Any]) -> str:
    backlog = figures["backlog"]
    lines = [
        f"{figures['config']}: empty vs {backlog['queued']:,} queued runs of {backlog['users']} users "
        f"and {backlog['waiting']:,} waiting for a person (ms, median (p90); statements)",
        "| operation | empty | loaded | loaded ÷ empty |",
        "|---|---|---|---|",
    ]
    for name in OPERATIONS:
        empty, loaded = figures["empty"][name], figures["loaded"][name]
        lines.append(f"| {name} | {cell(empty)} | {cell(loaded)} | {loaded['median_ms'] / empty['median_ms']:.2f} |")
    return "\n".join(lines)


def cell(figure: dict[str, float]) -> str:
    return f"{figure['median_ms']:.2f} ({figure['p90_ms']:.2f}); {figure['statements']:.0f}"


if __name__ == "__main__":
    sys.exit(main())
