"""Latency (c) with every poll kept: where the time from an asking turn's exit to `waiting_user`
seen goes, and whether a poll ever saw the old status after the change was written.

    .venv/bin/python -m bench.askpolls OUT.json [--rounds 1] [--inter 10] [--auto 10] [--poll-ms 10] [--cap 1]
    .venv/bin/python -m bench.askpolls --report A.json [B.json …]

Each round is a fresh `manage.py serve` on the embedded default (bench.__main__.serve, as `python
-m bench` makes it), warmed by `--auto` auto runs (the bench's sequential phase comes first too)
and 2 interactive runs, then `--inter` trip-planner runs one at a time, polled every `--poll-ms`
as bench/outside.py polls: for each run the asking turn's exit stamp, every status poll (sent,
answered, status) and the server times of its `running` status and `interaction_pending` events.
Rounds are appended to OUT.json. For an A/B, run a round at a time in each checkout, alternating;
the file runs against an older checkout's own code when started from there:
`cd OLD && PYTHONPATH=$PWD:… .venv/bin/python -S /path/to/bench/askpolls.py OUT.json`.

`--report` prints, per file: (c) (all runs, and each round's median, as the bench's cells take
it), the worker's part (exit stamp -> the `interaction_pending` event, written just before the
commit), the rest (that event -> the poll that saw it), the status GET's round trip, and the
polls sent more than 2 ms after the event that still answered an older status.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # started as a file, from the checkout it measures
    sys.path.insert(0, str(Path.cwd()))

from bench import outside
from bench.httpclient import Api
from bench.scenarios import INTERACTIVE_JOB, TERMINAL, BenchError, auto_job, create
from bench.services import loadavg

STALE_AFTER_S = 0.002  # a poll sent this long after the event is surely after its commit


def polled(api: Api, request_id: str, statuses: set[str], period: float, timeout: float = 60.0) -> list[list[Any]]:
    """outside.poll, keeping every poll: [sent, answered, status]; the last one's status is in `statuses`."""
    polls: list[list[Any]] = []
    deadline = time.monotonic() + timeout
    due = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(max(0.0, due - time.monotonic()))
        due = time.monotonic() + period
        sent = time.time()
        code, body = api.get(f"/v1/jobs/{request_id}")
        polls.append([sent, time.time(), body.get("status") if code == 200 else None])
        if polls[-1][2] in statuses:
            return polls
    raise BenchError(f"run {request_id} did not become one of {sorted(statuses)} within {timeout}s")


def asking_run(server: outside.Server, api: Api) -> dict[str, Any]:
    """One trip-planner run up to its question, then answered and finished (as the bench does)."""
    request_id, _, _ = create(api, INTERACTIVE_JOB)
    polls = polled(api, request_id, TERMINAL | {"waiting_user"}, server.poll)
    if polls[-1][2] != "waiting_user":
        raise BenchError(f"interactive run {request_id} became {polls[-1][2]}, not waiting_user")
    (exit_,) = server.turns(request_id, [("exit", "exec")])
    _, history = api.get(f"/v1/jobs/{request_id}/events/history?after_seq=0")
    events = [
        (e["kind"], e["payload"].get("to"), datetime.fromisoformat(e["ts"]).timestamp()) for e in history["events"]
    ]
    _, pending = api.get(f"/v1/jobs/{request_id}/interaction/pending")
    interaction = pending["pending"]["interaction_id"]
    code, answer = api.post(
        f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": interaction, "response": outside.REPLY}
    )
    if code != 200:
        raise BenchError(f"reply to {request_id} answered {code}: {answer}")
    outside.poll(api, request_id, TERMINAL, server.poll)
    return {
        "request_id": request_id,
        "exit": exit_["t"],
        "running_event": next(ts for kind, to, ts in events if kind == "status" and to == "running"),
        "pending_event": next(ts for kind, _, ts in events if kind == "interaction_pending"),
        "polls": polls,
    }


def measure_round(args: argparse.Namespace) -> dict[str, Any]:
    from bench.__main__ import serve

    root = Path(tempfile.mkdtemp(prefix="skillrunner-askpolls-"))
    root.chmod(0o755)  # the fake's directory is shown to the sandboxed engine
    result: dict[str, Any] = {"loadavg_before": loadavg()}
    try:
        fake = outside.Fake.install(root / "engine")
        with serve(root / "data", "embedded", args.cap, fake, args.poll_ms / 1000, args.sandbox) as (_, server):
            api = server.api()
            for _ in range(args.auto):
                request_id, _, _ = create(api, auto_job())
                outside.poll(api, request_id, TERMINAL, server.poll)
            runs = [asking_run(server, api) for _ in range(2 + args.inter)]
            api.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result.update(rows=runs[2:], loadavg_after=loadavg(), poll_ms=args.poll_ms, cap=args.cap, sandbox=args.sandbox)
    return result


def _line(name: str, values: list[float]) -> str:
    v = sorted(values)
    n = len(v)
    return (
        f"  {name:37} n={n:4} median {statistics.median(v):6.1f}  p10 {v[n // 10]:6.1f}  p25 {v[n // 4]:6.1f}"
        f"  p75 {v[(3 * n) // 4]:6.1f}  p90 {v[(9 * n) // 10]:6.1f}  max {v[-1]:6.1f}"
    )


def report(path: Path) -> None:
    rounds = json.loads(path.read_text())["rounds"]
    rows = [row for one in rounds for row in one["rows"]]
    c = [(row["polls"][-1][1] - row["exit"]) * 1000 for row in rows]
    stale = sum(
        1
        for row in rows
        for sent, _, status in row["polls"]
        if sent > row["pending_event"] + STALE_AFTER_S and status != "waiting_user"
    )
    medians = [statistics.median((row["polls"][-1][1] - row["exit"]) * 1000 for row in one["rows"]) for one in rounds]
    print(f"{path}: {len(rounds)} round(s), load average {', '.join(one['loadavg_before'] for one in rounds)}")
    print(f"  (c) each round's median (ms): {', '.join(f'{m:.1f}' for m in medians)}")
    print(_line("(c) exit -> waiting_user seen", c))
    print(_line("worker: exit -> interaction_pending", [(r["pending_event"] - r["exit"]) * 1000 for r in rows]))
    print(_line("that event -> waiting_user seen", [(r["polls"][-1][1] - r["pending_event"]) * 1000 for r in rows]))
    print(_line("GET round trip of the poll seeing it", [(r["polls"][-1][1] - r["polls"][-1][0]) * 1000 for r in rows]))
    print(f"  polls sent > {STALE_AFTER_S * 1000:.0f} ms after the event answering an older status: {stale}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.askpolls", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("output", nargs="?", type=Path, help="rounds are appended to this JSON")
    parser.add_argument("--rounds", type=int, default=1, help="fresh services, one after the other")
    parser.add_argument("--inter", type=int, default=10, help="interactive runs timed per round")
    parser.add_argument("--auto", type=int, default=10, help="auto runs warming each service first")
    parser.add_argument("--poll-ms", type=float, default=10.0)
    parser.add_argument("--cap", type=int, default=1, help="SKILLRUNNER_MAX_CONCURRENT_TURNS")
    parser.add_argument("--sandbox", choices=("bwrap", "off"), default="bwrap")
    parser.add_argument("--report", type=Path, nargs="+", help="print the figures of these files, and stop")
    args = parser.parse_args(argv)
    if args.report:
        for path in args.report:
            report(path)
        return 0
    if args.output is None:
        parser.error("an output file, or --report")
    for _ in range(args.rounds):
        saved = json.loads(args.output.read_text()) if args.output.exists() else {"rounds": []}
        saved["rounds"].append(measure_round(args))
        args.output.write_text(json.dumps(saved))
    report(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
