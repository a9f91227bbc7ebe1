"""`make bench`: what a user of the API sees, measured from outside, on both configurations.

    .venv/bin/python -m bench [--configs embedded,scaleout] [--caps 1,16] [--rounds 3] [--waiting 1000]

First what the provider relay adds to a model call (bench/relay.py), and one real turn of each
engine CLI, unconfined and in bubblewrap, against the scripted model (bench/clis.py). Then for each configuration, cap (SKILLRUNNER_MAX_CONCURRENT_TURNS) and round, a fresh
`manage.py serve` (what `make run` starts: daphne + `manage.py worker`) on a fresh database,
with bench/fakecodex.py as its codex, driven by bench/outside.py. Then, per configuration, one
service at the default cap 4 idles and parks `--waiting` interactive runs in waiting_user. Last,
per configuration, what a run costs beside `--backlog` queued runs (bench/backlog.py, R-SC1), and
`--crowd` live connections on one web process (and on two sharing Redis), idle and fanning out a
run event (bench/crowd.py, R-SC2), and what a GET /metrics scrape costs beside `--metrics-runs` runs
(bench/metrics.py, R-OP11).
Medians across rounds are printed as a Markdown table beside the reference and the floor; the
raw figures go to test-output/bench/outside.json. `python -m bench.detail` is the detailed
benchmark (segments, websocket, activity, webhooks, sandbox cost).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.service_processes import REPO, ServiceProcesses

from . import backlog, clis, crowd, metrics, outside, relay, report, scenarios
from .httpclient import Api
from .services import CONFIGS, bench_service, loadavg, wait_ready
from .system import tree_engines

DEFAULT_CAP = 4


@contextmanager
def serve(
    data_dir: Path, config: str, cap: int, fake: outside.Fake, poll: float, sandbox: str
) -> Iterator[tuple[ServiceProcesses, outside.Server]]:
    """`manage.py serve` on `config` at slot cap `cap`, ready for a user with a token."""
    env = {
        "SKILLRUNNER_CODEX_BIN": str(fake.path),
        "SKILLRUNNER_MAX_CONCURRENT_TURNS": str(cap),
        "SKILLRUNNER_SANDBOX": sandbox,
    }
    service = bench_service(data_dir, config, env)
    try:
        process = service.start_serve()
        ping = Api("127.0.0.1", service.port, "")
        service.wait_until(lambda: _answers(ping), 120, "manage.py serve to answer")
        ping.close()
        token = service.token("bench")
        wait_ready(service, token)
        yield service, outside.Server(service.port, token, process.pid, data_dir, fake, poll, confined=sandbox != "off")
    finally:
        service.stop()


def _answers(api: Api) -> bool:
    try:
        return api.get("/v1/system/ping")[0] == 204
    except OSError:
        api.close()
        return False


def waiting(root: Path, config: str, fake: outside.Fake, args: argparse.Namespace) -> dict[str, Any]:
    """At the default cap: idle memory and CPU, then `--waiting` runs parked in waiting_user."""
    data_dir, poll = root / f"{config}-waiting", args.poll_ms / 1000
    with serve(data_dir, config, DEFAULT_CAP, fake, poll, args.sandbox) as (service, server):
        result: dict[str, Any] = {"cap": DEFAULT_CAP, "loadavg_before": loadavg()}
        result["idle"] = outside.idle(server, args.settle, args.idle_seconds)
        target = scenarios.Target(config, service, fake.path, server.token)
        result.update(
            scenarios.memory_with_waiting(
                target, args.waiting, server.memory, lambda: tree_engines(server.pid, fake.marks)
            )
        )
        result["runs"] = args.waiting
        result["loadavg_after"] = loadavg()
    return result


def backlog_figures(root: Path, config: str, queued: int) -> dict[str, Any]:
    """R-SC1 in a process of its own (bench/backlog.py sets Django up for one database)."""
    output = root / f"{config}-backlog.json"
    urls = CONFIGS[config]
    command = [sys.executable, "-m", "bench.backlog", "--queued", str(queued), "--json", str(output)]
    command += ["--database-url", urls["DATABASE_URL"], "--redis-url", urls["REDIS_URL"]]
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return json.loads(output.read_text())


def metrics_figures(root: Path, config: str, runs: int) -> dict[str, Any]:
    """R-OP11 in a process of its own (bench/metrics.py sets Django up for one database)."""
    output = root / f"{config}-metrics.json"
    command = [sys.executable, "-m", "bench.metrics", "--runs", str(runs), "--json", str(output)]
    command += ["--database-url", CONFIGS[config]["DATABASE_URL"]]
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return json.loads(output.read_text())


def print_tables(results: dict[str, Any]) -> None:
    print()
    print(report.outside_table(results))
    print()
    print(report.waiting_table(results["waiting"]))
    for figures in results.get("backlog", {}).values():
        print()
        print(backlog.table(figures))
    for figures in results.get("metrics", {}).values():
        print(metrics.line(figures))
    if results.get("relay"):
        print()
        print(relay.line(results["relay"]))
    if results.get("cli_turns"):
        print()
        print(report.cli_turns(results["cli_turns"]))
    if results.get("crowd"):
        print()
        print(report.crowd_table(results["crowd"]))
    rounds, elapsed = results["args"]["rounds"], results["elapsed_s"]
    before, after = results["loadavg_before"], results["loadavg_after"]
    sandbox = results["args"].get("sandbox", "bwrap")  # JSONs written before --sandbox existed ran in bwrap
    print(
        f"\n{rounds} round(s), engines' sandbox {sandbox}; took {elapsed:.0f}s; load average {before} before, {after} after"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", default="embedded,scaleout", help="comma-separated: embedded, scaleout")
    parser.add_argument("--caps", default="1,16", help="SKILLRUNNER_MAX_CONCURRENT_TURNS values, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="fresh services per configuration and cap")
    parser.add_argument("--seq", type=int, default=30, help="auto runs one at a time, per round")
    parser.add_argument("--inter", type=int, default=10, help="interactive runs one at a time, per round")
    parser.add_argument("--warmup", type=int, default=2, help="discarded runs before each of the two")
    parser.add_argument("--burst", type=int, default=50, help="runs submitted at once")
    parser.add_argument("--poll-ms", type=float, default=20.0, help="status polling period of one run")
    parser.add_argument("--burst-poll-ms", type=float, default=50.0, help="period of a polling round in a burst")
    parser.add_argument(
        "--delay-burst-ms",
        type=float,
        default=1000.0,
        help="another burst with this engine time, at caps >= 16; 0 skips",
    )
    parser.add_argument("--settle", type=float, default=5.0, help="quiet seconds before a memory reading")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle CPU window")
    parser.add_argument("--floor", type=int, default=30, help="direct spawns of the fake for the floor")
    parser.add_argument("--waiting", type=int, default=1000, help="runs parked in waiting_user at cap 4; 0 skips")
    parser.add_argument(
        "--backlog", type=int, default=10_000, help="queued runs beside the R-SC1 figures (bench/backlog.py); 0 skips"
    )
    parser.add_argument(
        "--metrics-runs", type=int, default=10_000, help="runs beside a GET /metrics scrape (bench/metrics.py); 0 skips"
    )
    parser.add_argument(
        "--crowd", type=int, default=1000, help="live connections on one web process (bench/crowd.py); 0 skips"
    )
    parser.add_argument(
        "--relay-calls", type=int, default=500, help="model calls straight and through the relay; 0 skips"
    )
    parser.add_argument(
        "--cli-turns", type=int, default=1, help="real turns per engine CLI and sandbox mode (bench/clis.py); 0 skips"
    )
    parser.add_argument(
        "--sandbox",
        choices=("bwrap", "off"),
        default="bwrap",
        help="SKILLRUNNER_SANDBOX of the service: off shows the service's own part without the sandbox's",
    )
    parser.add_argument("--output", type=Path, default=REPO / "test-output" / "bench" / "outside.json")
    parser.add_argument("--keep", action="store_true", help="keep the data directories (service logs)")
    parser.add_argument("--report", type=Path, help="print the tables of a JSON this wrote earlier, and stop")
    args = parser.parse_args(argv)
    if args.report:
        print_tables(json.loads(args.report.read_text()))
        return 0
    configs = [name.strip() for name in args.configs.split(",") if name.strip()]
    if unknown := [name for name in configs if name not in CONFIGS]:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}")
    caps = [int(cap) for cap in args.caps.split(",")]

    root = Path(tempfile.mkdtemp(prefix="skillrunner-outside-"))
    root.chmod(0o755)  # the fake's directory is shown to the sandboxed engine, which runs as another uid
    started = time.monotonic()
    failed = True
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "loadavg_before": loadavg()}
    try:
        fake = outside.Fake.install(root / "engine")
        results["floor"] = outside.floor(fake, root / "floor", args.floor)
        print(f"floor: {json.dumps(results['floor'])}", flush=True)
        if args.relay_calls:
            results["relay"] = relay.measure(args.relay_calls)
            print(relay.line(results["relay"]), flush=True)
        if args.cli_turns:
            results["cli_turns"] = clis.measure(root / "cli-turns", args.cli_turns)
            print(report.cli_turns(results["cli_turns"]), flush=True)
        results["runs"] = {}
        for config in configs:
            for cap in caps:
                key = f"{config} cap {cap}"
                results["runs"][key] = []
                for index in range(args.rounds):
                    data_dir = root / f"{config}-cap{cap}-{index}"
                    with serve(data_dir, config, cap, fake, args.poll_ms / 1000, args.sandbox) as (_, server):
                        result = outside.measure(server, args, delay_burst=cap >= 16)
                    results["runs"][key].append(result)
                    print(f"[{key} round {index + 1}] {report.round_line(result)}", flush=True)
        results["waiting"] = {}
        if args.waiting:
            for config in configs:
                results["waiting"][config] = waiting(root, config, fake, args)
                print(f"[{config} waiting] {json.dumps(results['waiting'][config])[:400]}", flush=True)
        results["backlog"] = {}
        if args.backlog:
            for config in configs:
                results["backlog"][config] = backlog_figures(root, config, args.backlog)
                print(backlog.table(results["backlog"][config]), flush=True)
        results["metrics"] = {}
        if args.metrics_runs:
            for config in configs:
                results["metrics"][config] = metrics_figures(root, config, args.metrics_runs)
                print(metrics.line(results["metrics"][config]), flush=True)
        if args.crowd:
            setups = [setup for setup, (config, _) in crowd.SETUPS.items() if config in configs]
            results["crowd"] = crowd.measure(root, setups, crowd.Options(connections=args.crowd))
        failed = False
    finally:
        if args.keep or failed:
            print(f"data (and the service logs) kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    results["elapsed_s"] = time.monotonic() - started
    results["loadavg_after"] = loadavg()
    print_tables(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1))
    print(f"raw figures: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
