"""What one run costs beside a backlog (R-SC1): creating a run, dispatching on a slot release,
claiming a turn and a status GET, on an empty service and on one holding 10,000 queued runs of
200 users and 1,000 runs waiting for a person (`manage.py seed_backlog`).

    .venv/bin/python -m bench.backlog [--database-url postgres://… --redis-url redis://…]
                                      [--queued 10000 --waiting 1000 --users 200] [--repeat 200] [--json F]

Two services side by side, each in a process of its own on a throwaway database (a throwaway
PostgreSQL database with --database-url, and then the Redis broker and channel layer with
--redis-url), with the real code paths and their real task queue: the empty one, and the loaded one
seeded with the backlog. Both have 16 slots of which 15 are held by 5 other users (the usual state
when one frees up). Creating and reading go through Django's test client with an API token
(middleware, view, serializer, queries; no socket). Each operation is timed `--repeat` times on
each service, in blocks of BLOCK calls taken by the two in turn, so that what the machine does
meanwhile (a neighbour's load, a slower minute) falls on both alike: timed one after the other, a
minute apart, the ratios moved by more than R-SC1's margin between two runs of the same commit. A
turn claimed is canceled and a run created is canceled outside the timing, so each sample finds the
same state. Medians, p90s and statements per call; the ratio is loaded over empty (R-SC1: at most
1.2).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NamedTuple

CAP = 16
HOLDERS = 5  # hold 3 slots each: 15 of 16
WORKER = "bench:1:backlog"
OPERATIONS = ("create", "dispatch", "claim", "status")
WARMUP = 20
BLOCK = 10  # calls timed on one service before the other takes its turn


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

    spawn = multiprocessing.get_context("spawn")  # each side sets Django up for its own database
    # Both sides on one core, which they take in turn: on two cores, one busier with something
    # else than the other made one side's status GET 1.7 x the other's with nothing else different.
    core = max(os.sched_getaffinity(0))
    sides = {name: Side(spawn, name, args, core) for name in ("empty", "loaded")}
    try:
        figures: dict[str, Any] = {
            "config": sides["empty"].config(),
            "backlog": {"queued": args.queued, "waiting": args.waiting, "users": args.users},
        }
        figures.update(measure_side_by_side(sides, args.repeat))
    finally:
        for side in sides.values():
            side.stop()
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


def measure_side_by_side(sides: dict[str, Side], repeat: int) -> dict[str, dict[str, dict[str, float]]]:
    """Each operation warmed up on both services, then timed on each in blocks taken in turn
    (which one goes first alternates); the figures by service, then by operation."""
    figures: dict[str, dict[str, dict[str, float]]] = {name: {} for name in sides}
    for operation in OPERATIONS:
        samples: dict[str, list[float]] = {name: [] for name in sides}
        for side in sides.values():
            side.ask("time", operation, WARMUP)
        order = list(sides)
        for _ in range(-(-repeat // BLOCK)):
            for name in order:
                samples[name] += sides[name].ask("time", operation, min(BLOCK, repeat - len(samples[name])))
            order.reverse()
        for name, side in sides.items():
            figures[name][operation] = {
                "median_ms": statistics.median(samples[name]),
                "p90_ms": statistics.quantiles(samples[name], n=10)[-1],
                "statements": side.ask("statements", operation),
            }
    return figures


class Side:
    """One service in a process of its own, timing what it is asked to (`serve`)."""

    def __init__(self, context: Any, name: str, args: argparse.Namespace, core: int) -> None:
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=serve, args=(theirs, name, args, core), name=f"backlog-{name}")
        self.process.start()
        theirs.close()

    def ask(self, *request: Any) -> Any:
        self.connection.send(request)
        reply = self.connection.recv()
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def config(self) -> str:
        return self.ask("config")

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.connection.send(("stop",))
            except OSError:
                pass
        self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def serve(connection: Connection, name: str, args: argparse.Namespace, core: int) -> None:
    """A side's process, on `core`: its throwaway service (seeded with the backlog when `name` is
    "loaded"), then requests until "stop": ("time", operation, n) answers n timings in ms,
    ("statements", operation) how many statements one call runs, ("config",) the configuration's name."""
    from .inprocess import throwaway_service

    os.sched_setaffinity(0, {core})

    def settings(root: Path) -> dict[str, str]:
        return {
            "REDIS_URL": args.redis_url,
            "SKILLRUNNER_QUEUE_NAME": f"backlog-{name}-{time.monotonic_ns()}",
            "SKILLRUNNER_MAX_CONCURRENT_TURNS": str(CAP),
            "SKILLRUNNER_USER_MAX_RUNNING": "3",
            # The bench's own user creates thousands of runs in a minute, and the queue must hold the backlog.
            "SKILLRUNNER_MAX_QUEUED_RUNS": str(args.queued + 1_000),
            "SKILLRUNNER_RATE_RUN_CREATE": "1000000/min",
        }

    with throwaway_service(f"backlog-{name}", args.database_url, settings) as database_url:
        from django.core.management import call_command
        from django_q.brokers import get_broker

        bench = Bench()
        if name == "loaded":
            call_command("seed_backlog", queued=args.queued, waiting=args.waiting, users=args.users, verbosity=0)
        bench.analyze()  # both: without statistics PostgreSQL planned the empty side's reads worse
        operations = bench.operations()
        config = ("PostgreSQL" if database_url else "SQLite") + (" + Redis" if args.redis_url else "")
        while (request := connection.recv())[0] != "stop":
            try:
                kind, *rest = request
                if kind == "config":
                    connection.send(config)
                elif kind == "time":
                    operation, count = rest
                    connection.send(operations[operation].times(count))
                else:
                    connection.send(operations[rest[0]].statements())
            except Exception as error:  # the parent raises it, with its own traceback lost but the message kept
                connection.send(RuntimeError(f"{name}: {request}: {error!r}"))
        get_broker().purge_queue()  # the turns offered meanwhile


class Operation(NamedTuple):
    """`call(prepare())`, timed; `cleanup` gets what it returned, untimed."""

    call: Callable[[Any], Any]
    prepare: Callable[[], Any] = lambda: None
    cleanup: Callable[[Any], None] = lambda _: None

    def times(self, count: int) -> list[float]:
        """`count` calls, each in ms."""
        elapsed = []
        for _ in range(count):
            argument = self.prepare()
            began = time.perf_counter()
            returned = self.call(argument)
            elapsed.append((time.perf_counter() - began) * 1000)
            self.cleanup(returned)
        return elapsed

    def statements(self) -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        argument = self.prepare()
        with CaptureQueriesContext(connection) as statements:
            returned = self.call(argument)
        self.cleanup(returned)
        return len(statements)


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

    def operations(self) -> dict[str, Operation]:
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

        return {
            "create": Operation(lambda _: self.create(), cleanup=self.cancel),
            "dispatch": Operation(lambda _: dispatch_queued_runs(), prepare=offer_again),
            "claim": Operation(claim, prepare=turn_to_claim, cleanup=self.cancel),
            "status": Operation(lambda _: self.client.get(f"/v1/jobs/{self.read}")),
        }


def timed(
    call: Callable[[Any], Any],
    repeat: int,
    *,
    prepare: Callable[[], Any] = lambda: None,
    cleanup: Callable[[Any], None] = lambda _: None,
) -> dict[str, float]:
    """Median and p90 in ms of `call(prepare())` after WARMUP untimed calls (statements prepared,
    caches filled), and the statements one more call runs; `cleanup` gets what each call
    returned, untimed. One service alone (bench.metrics); R-SC1's two take turns instead."""
    operation = Operation(call, prepare, cleanup)
    operation.times(WARMUP)
    times = operation.times(repeat)
    return {
        "median_ms": statistics.median(times),
        "p90_ms": statistics.quantiles(times, n=10)[-1],
        "statements": operation.statements(),
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
