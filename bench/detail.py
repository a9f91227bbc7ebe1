"""The detailed benchmark: where the time of a turn goes, websocket, activity, webhooks, sandbox.

    .venv/bin/python -m bench.detail [--configs embedded,scaleout] [--quick] [--profile DIR]

`make bench` runs the outside benchmark (`python -m bench`) instead. Here each configuration gets a fresh service (daphne + one `manage.py worker`, started by
tests.support.service_processes) on a fresh database, with the bench engine as SKILLRUNNER_CODEX_BIN.
Results are printed as a Markdown table and written as JSON (default test-output/bench/).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.service_processes import REPO

from . import report, scenarios
from .engine import measure_floor, measure_sandbox_cost, write_engine
from .services import CONFIGS, bench_service, loadavg, wait_ready
from .system import idle_cpu_percent, memory_mib, processes_running

OVERALL_TIMEOUT = 20 * 60


class _Overtime(Exception):
    pass


def _alarm(signum, frame):
    raise _Overtime(f"the benchmark ran over {OVERALL_TIMEOUT}s")


def bench_config(name: str, root: Path, engine: Path, args: argparse.Namespace, profiler=None) -> dict[str, Any]:
    service = bench_service(root / name, name, {"SKILLRUNNER_CODEX_BIN": str(engine)})
    result: dict[str, Any] = {"config": name, "loadavg_before": loadavg()}
    try:
        service.start()
        token = service.token("bench")
        wait_ready(service, token)
        target = scenarios.Target(name, service, engine, token)
        time.sleep(2.0)
        result["memory"] = {"idle": memory_mib(target.pgids())}
        result["idle_cpu_percent"] = idle_cpu_percent(target.pgids(), args.idle_seconds)
        print(f"[{name}] idle: {result['memory']['idle']}, CPU {result['idle_cpu_percent']:.1f}% of a core", flush=True)

        with profiler.phase(target, "latency") if profiler else _null():
            samples = scenarios.latencies(target, args.auto, args.interactive)
        result["latency"] = samples.values
        print(f"[{name}] latency samples done", flush=True)
        if args.webhooks:
            result["latency"].update(scenarios.webhook_latencies(target, args.webhooks).values)
            print(f"[{name}] webhook samples done", flush=True)

        with profiler.phase(target, "activity") if profiler else _null():
            result["latency"]["activity_ws"] = scenarios.activity_latency(target, args.activity)
        print(f"[{name}] activity samples: {len(result['latency']['activity_ws'])}", flush=True)

        result["burst"] = []
        with profiler.phase(target, "burst") if profiler else _null():
            for _ in range(args.bursts):
                result["burst"].append(scenarios.burst(target, args.burst_size))
                time.sleep(1.0)
        print(
            f"[{name}] bursts: {[round(b['runs_per_s'], 1) for b in result['burst']]} runs/s; peak PostgreSQL connections {[b['peak_db_connections'] for b in result['burst']]}",
            flush=True,
        )

        time.sleep(2.0)
        result["memory"]["warm"] = memory_mib(target.pgids())
        result["warm_idle_cpu_percent"] = idle_cpu_percent(target.pgids(), args.idle_seconds)
        print(
            f"[{name}] idle after load: {result['memory']['warm']}, CPU {result['warm_idle_cpu_percent']:.1f}% of a core",
            flush=True,
        )

        if args.waiting:
            result["waiting_runs"] = args.waiting
            waiting = scenarios.memory_with_waiting(
                target, args.waiting, lambda: memory_mib(target.pgids()), lambda: processes_running(engine)
            )
            result["memory"]["waiting"] = waiting["memory"]
            result["parking"] = waiting["parked"]
            print(f"[{name}] {args.waiting} waiting: {waiting}", flush=True)
        result["loadavg_after"] = loadavg()
    finally:
        service.stop()
    return result


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.detail", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", default="embedded,scaleout", help="comma-separated: embedded, scaleout")
    parser.add_argument(
        "--auto",
        type=int,
        default=100,
        help="auto-run latency samples per configuration (half polled, half on the websocket)",
    )
    parser.add_argument("--interactive", type=int, default=60, help="interactive-run latency samples per configuration")
    parser.add_argument(
        "--activity", type=int, default=10, help="runs printing 20 activity lines each (stdout line -> websocket)"
    )
    parser.add_argument("--webhooks", type=int, default=30, help="interactive runs timed for (g) webhook delivery")
    parser.add_argument("--bursts", type=int, default=3, help="repetitions of (e)")
    parser.add_argument("--burst-size", type=int, default=50)
    parser.add_argument("--waiting", type=int, default=1000, help="runs parked in waiting_user for (f); 0 skips")
    parser.add_argument("--floor", type=int, default=200, help="floor samples")
    parser.add_argument("--sandbox", type=int, default=100, help="sandbox cost samples (each mode)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="window for the idle CPU measurement")
    parser.add_argument("--quick", action="store_true", help="small samples, 100 waiting runs: a smoke run")
    parser.add_argument("--profile", type=Path, help="record py-spy profiles of web and worker into this directory")
    parser.add_argument("--output", type=Path, default=REPO / "test-output" / "bench" / "detail.json")
    parser.add_argument("--keep", action="store_true", help="keep the data directories (logs) for inspection")
    args = parser.parse_args(argv)
    if args.quick:
        args.auto, args.interactive, args.bursts, args.waiting, args.floor, args.activity = 10, 6, 1, 100, 50, 3
        args.sandbox = 20
    configs = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in configs if name not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}")

    profiler = None
    if args.profile:
        from .profiling import Profiler

        profiler = Profiler(args.profile)

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(OVERALL_TIMEOUT)
    root = Path(tempfile.mkdtemp(prefix="skillrunner-bench-"))
    started = time.monotonic()
    failed = True
    try:
        engine = write_engine(root / "engine")
        floor = measure_floor(engine, root / "floor", args.floor)
        sandbox_cost = measure_sandbox_cost(engine, root / "sandbox-cost", args.sandbox)
        results = {name: bench_config(name, root, engine, args, profiler) for name in configs}
        failed = False
    finally:
        signal.alarm(0)
        if args.keep or failed:
            print(f"data (and the service logs) kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started

    print()
    print(report.table(results, floor))
    print()
    print(report.breakdown(results))
    print()
    print(report.sample_counts(results))
    if args.sandbox:
        print()
        print(report.sandbox_cost(sandbox_cost))
    print(f"floor n={args.floor}; SKILLRUNNER_MAX_CONCURRENT_TURNS=4 (default); took {elapsed:.0f}s")
    for name, result in results.items():
        print(f"{name}: load average {result['loadavg_before']} before, {result.get('loadavg_after', '?')} after")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"results": results, "floor": floor, "sandbox_cost": sandbox_cost, "elapsed_s": elapsed}, indent=1)
    )
    print(f"raw samples: {args.output}")
    if profiler:
        print(profiler.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
