"""Wall-clock cProfile of the worker's turn path, in-process, against either database.

    .venv/bin/python -m bench.turnprofile [--database-url postgres://…] [--redis-url redis://…] [--turns 50] [--asking]

Creates auto runs through runs.services (dispatch switched off), then runs
`run_claimed_turn` for each under cProfile with a wall clock, so waits count: database round
trips, the channel-layer notifications, the engine process and its exit detection. Prints the
project functions by cumulative time per turn. Uses the bench engine and a throwaway data
directory (and a throwaway PostgreSQL database when --database-url is given).

`--asking`: interactive trip-planner runs instead, whose turn asks and leaves the run
waiting_user: the path behind latency (c) of docs/benchmarks.md. Each turn's end is also timed
apart: the engine's exit stamp -> the commit that made the run waiting_user, the CPU time it
took, and the statements from the worker's `_finish_turn` on; those turns run first, outside the
profile, whose own cost would be timed too. For an A/B, the file runs against an older checkout's
code when started from there (`cd OLD && PYTHONPATH=$PWD:… .venv/bin/python -S
/path/to/bench/turnprofile.py --asking`): only its turn ends need the checkout's worker to call
`runs.services.complete_turn` from `worker.execution._finish_turn`.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # started as a file, from the checkout it measures
    sys.path.insert(0, str(Path.cwd()))


class TurnEnds:
    """--asking: each turn's end, from the engine's exit stamp (bench/engine.py's .bench-times) to
    the commit that made the run waiting_user and on to run_claimed_turn's return, the worker
    thread's CPU time from `_finish_turn` to that commit (less sensitive to a shared machine's load
    than the wall clock), and the statements of `_finish_turn` (the commit's on-commit hooks
    included). Medians and the spread over the turns."""

    def __init__(self) -> None:
        import runs.services as services
        import worker.execution as execution

        self.rows: list[dict[str, float]] = []
        self._finish_turn = execution._finish_turn
        execution._finish_turn = self._finishing
        self._complete_turn = services.complete_turn
        services.complete_turn = self._completing
        self._completing_now = False
        self._current: dict[str, float] = {}

    def _completing(self, *args, **kwargs):
        self._completing_now = True
        try:
            return self._complete_turn(*args, **kwargs)
        finally:
            self._completing_now = False

    def _finishing(self, *args, **kwargs):
        from django.db import connection

        row = self._current
        row["finish"], row["finish_cpu"] = time.time(), time.thread_time()
        statements = 0
        commits: list[tuple[float, float]] = []

        def count(execute, sql, params, many, context):
            nonlocal statements
            statements += 1
            return execute(sql, params, many, context)

        def committed() -> None:
            commits.append((time.time(), time.thread_time()))

        original_on_commit = connection.on_commit

        def on_commit(func, robust=False):
            # The first callback complete_turn's transaction registers runs first, right at its commit.
            if self._completing_now and not connection.run_on_commit:
                original_on_commit(committed)
            original_on_commit(func, robust)

        connection.on_commit = on_commit
        try:
            with connection.execute_wrapper(count):
                return self._finish_turn(*args, **kwargs)
        finally:
            del connection.on_commit
            row["statements"] = statements
            row["commit"], row["commit_cpu"] = commits[0] if commits else (float("nan"), float("nan"))

    @contextlib.contextmanager
    def timing(self, request_id: str) -> Iterator[None]:
        from runs.models import Run

        self._current = {}
        yield
        returned = time.time()
        run = Run.objects.get(pk=request_id)
        stamps = (Path(run.run_dir) / ".bench-times").read_text().split()
        exit_stamp = float(stamps[stamps.index("exit") + 1])
        row = self._current
        self.rows.append(
            {
                "exit -> _finish_turn": (row["finish"] - exit_stamp) * 1000,
                "exit -> waiting_user committed": (row["commit"] - exit_stamp) * 1000,
                "CPU _finish_turn -> committed": (row["commit_cpu"] - row["finish_cpu"]) * 1000,
                "exit -> turn returned": (returned - exit_stamp) * 1000,
                "statements from _finish_turn": row["statements"],
            }
        )

    def report(self) -> None:
        print(f"{'turn end (--asking)':32} {'median':>8} {'p10':>8} {'p90':>8} {'max':>8}")
        for key in self.rows[0]:
            values = sorted(row[key] for row in self.rows)
            n = len(values)
            print(
                f"{key:32} {statistics.median(values):8.2f} {values[n // 10]:8.2f}"
                f" {values[(9 * n) // 10]:8.2f} {values[-1]:8.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.turnprofile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--asking", action="store_true", help="interactive turns that ask (trip-planner)")
    args = parser.parse_args(argv)

    from bench.engine import write_engine
    from bench.inprocess import throwaway_service
    from bench.profiling import REPO_PACKAGES

    def env(root: Path) -> dict[str, str]:
        return {
            "REDIS_URL": args.redis_url,
            "SKILLRUNNER_QUEUE_NAME": f"turnprofile-{uuid.uuid4().hex[:8]}",
            "SKILLRUNNER_CODEX_BIN": str(write_engine(root / "engine")),
        }

    with throwaway_service("turnprofile", args.database_url, env) as database_url:
        from django.contrib.auth import get_user_model

        import runs.services as services
        import runs.task_queue
        from runs.models import Run
        from worker.execution import run_claimed_turn

        owner = get_user_model().objects.create(username="turnprofile")
        runs.task_queue.enqueue_turn = lambda request_id, attempt: None  # the profile drives the turns itself

        def create() -> str:
            run = services.create_run(
                owner=owner,
                skill_id="trip-planner" if args.asking else "haiku-writer",
                engine="codex",
                model=None,
                input={} if args.asking else {"topic": uuid.uuid4().hex},
                parameter={},
                runtime_options={"execution_mode": "interactive"} if args.asking else {},
            )
            return str(run.pk)

        run_claimed_turn(create(), 1)  # warm: imports, engine probes
        if args.asking:
            ends = TurnEnds()
            for _ in range(args.turns):
                request_id = create()
                with ends.timing(request_id):
                    run_claimed_turn(request_id, 1)
            ends.report()
        profile = cProfile.Profile(time.perf_counter)
        began = time.perf_counter()
        for _ in range(args.turns):
            request_id = create()
            profile.enable()
            run_claimed_turn(request_id, 1)
            profile.disable()
        elapsed = time.perf_counter() - began
        statuses = sorted(set(Run.objects.values_list("status", flat=True)))
        print(
            f"{args.turns} turns on {'PostgreSQL' if database_url else 'SQLite'}"
            f"{' + Redis layer' if args.redis_url else ''}; statuses {statuses}; {elapsed / args.turns * 1000:.1f} ms per create + turn"
        )
        stats = pstats.Stats(profile)
        rows = []
        for (filename, line, name), (_, calls, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
            relative = os.path.relpath(filename, Path.cwd()) if filename.startswith("/") else filename
            if relative.startswith(REPO_PACKAGES) or name in (
                "wait",
                "communicate",
                "_try_wait",
                "sleep",
                "execute",
                "group_send",
                "__call__",
            ):
                rows.append((cumulative / args.turns * 1000, calls / args.turns, f"{relative}:{line}({name})"))
        rows.sort(reverse=True)
        print(f"{'ms/turn':>8} {'calls/turn':>10}  function")
        for cumulative, calls, label in rows[: args.top]:
            print(f"{cumulative:8.2f} {calls:10.1f}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
