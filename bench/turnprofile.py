"""Wall-clock cProfile of the worker's turn path, in-process, against either database.

    .venv/bin/python -m bench.turnprofile [--database-url postgres://…] [--redis-url redis://…] [--turns 50]

Creates auto runs through runs.services (dispatch switched off), then runs
`run_claimed_turn` for each under cProfile with a wall clock, so waits count: database round
trips, the channel-layer notifications, the engine process and its exit detection. Prints the
project functions by cumulative time per turn. Uses the bench engine and a throwaway data
directory (and a throwaway PostgreSQL database when --database-url is given).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
import uuid
from pathlib import Path


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
    args = parser.parse_args(argv)

    from .engine import write_engine
    from .inprocess import throwaway_service

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
                skill_id="haiku-writer",
                engine="codex",
                model=None,
                input={"topic": uuid.uuid4().hex},
                parameter={},
                runtime_options={},
            )
            return str(run.pk)

        run_claimed_turn(create(), 1)  # warm: imports, engine probes
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
            relative = (
                os.path.relpath(filename, Path(__file__).resolve().parents[1]) if filename.startswith("/") else filename
            )
            if relative.startswith(("runs/", "engines/", "skillrunner/")) or name in (
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
