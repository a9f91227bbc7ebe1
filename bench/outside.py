"""What a user sees of a running service, measured from outside (`python -m bench`).

The service is `manage.py serve` (what `make run` starts) with bench/fakecodex.py as its codex.
The client polls `GET /v1/jobs/{id}` at a fixed period (20 ms by default) as a user's script
would; the engine's own `start` and `exit` lines (one log per run directory) say when each turn
ran. CPU and memory are those of the serve process and all it forked, without the engine
processes (bwrap names the fake on its command line, so it and everything under it is left out).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .fakecodex import HAIKU
from .httpclient import Api
from .scenarios import INTERACTIVE_JOB, TERMINAL, BenchError, auto_job, create
from .services import loadavg
from .system import tree_cpu, tree_memory

FAKE_LOG = ".bench-events.jsonl"  # relative: the engine writes it in its working directory
REPLY = "Lisbon, in spring"


def summary(values: list[float | None]) -> dict[str, float | int]:
    """n, median, p90 and max of seconds, in ms."""
    ms = sorted(v * 1000 for v in values if v is not None)
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p90_ms": ms[min(len(ms) - 1, int(0.9 * len(ms)))],
        "max_ms": ms[-1],
    }


# --- the engine ---------------------------------------------------------------------------------


@dataclass
class Fake:
    """bench/fakecodex.py installed as `<directory>/codex` with its settings file beside it."""

    path: Path

    @classmethod
    def install(cls, directory: Path) -> Fake:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "codex"
        path.write_bytes((Path(__file__).parent / "fakecodex.py").read_bytes())
        path.chmod(0o755)
        fake = cls(path)
        fake.configure(delay_ms=0)
        return fake

    def configure(self, delay_ms: float) -> None:
        conf = self.path.with_name("codex.conf.json")
        staged = conf.with_suffix(".tmp")
        staged.write_text(json.dumps({"log": FAKE_LOG, "delay_ms": delay_ms}))
        staged.replace(conf)  # a turn starting meanwhile reads the old or the new file, never half

    @property
    def marks(self) -> list[bytes]:
        """What names an engine process on its command line (the fake itself, or bwrap starting it)."""
        return [str(self.path).encode()]


def fake_records(run_dir: Path) -> list[dict[str, Any]]:
    try:
        lines = (run_dir / FAKE_LOG).read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.endswith("}")]


def floor(fake: Fake, workdir: Path, samples: int) -> dict[str, Any]:
    """The fake spawned straight from Python with its output piped: the whole subprocess.run,
    and spawn -> the script's start stamp."""
    (workdir / "artifacts").mkdir(parents=True, exist_ok=True)
    argv = [str(fake.path), "exec", "--skip-git-repo-check", "--json", "--yolo", "write a haiku"]
    totals, starts = [], []
    for _ in range(samples):
        began, perf = time.time(), time.perf_counter()
        done = subprocess.run(argv, cwd=workdir, capture_output=True)
        totals.append(time.perf_counter() - perf)
        if done.returncode != 0:
            raise BenchError(f"the fake failed: {done.stderr[-300:]!r}")
        starts.append(fake_records(workdir)[-2]["t_proc"] - began)
    return {"subprocess_total": summary(totals), "spawn_to_start": summary(starts)}


# --- the service --------------------------------------------------------------------------------


@dataclass
class Server:
    port: int
    token: str
    pid: int  # the `manage.py serve` process
    data_dir: Path
    fake: Fake
    poll: float  # seconds between status polls of one run
    confined: bool = True  # engines run in bwrap (SKILLRUNNER_SANDBOX), so their CPU never reaches the tree

    def api(self) -> Api:
        return Api("127.0.0.1", self.port, self.token)

    def cpu(self) -> dict[str, float]:
        return tree_cpu(self.pid, self.fake.marks)

    def memory(self) -> dict[str, float]:
        return tree_memory(self.pid, self.fake.marks)

    def turns(self, request_id: str, wanted: list[tuple[str, str]], timeout: float = 5.0) -> list[dict[str, Any]]:
        """The fake's records (ev, kind) of one run, in that order; its exit line is written just
        before it exits, so wait a moment for them."""
        deadline = time.monotonic() + timeout
        while True:
            records = fake_records(self.data_dir / "runs" / request_id)
            found = [next((r for r in records if (r["ev"], r["kind"]) == want), None) for want in wanted]
            if all(found) or time.monotonic() > deadline:
                return [r or {} for r in found]
            time.sleep(0.005)

    def engine_cpu(self, request_ids: list[str]) -> tuple[float, int]:
        """The fake's own CPU seconds over these runs' turns, and how many turns exited."""
        exits = [r for rid in request_ids for r in fake_records(self.data_dir / "runs" / rid) if r["ev"] == "exit"]
        return sum(r["cpu"] for r in exits), len(exits)


def poll(api: Api, request_id: str, statuses: set[str], period: float, timeout: float = 60.0) -> tuple[str, float]:
    """GET the run every `period` (from one request's start to the next's) until its status is
    one of `statuses`; the status and when the answer arrived."""
    deadline = time.monotonic() + timeout
    due = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(max(0.0, due - time.monotonic()))
        due = time.monotonic() + period
        code, body = api.get(f"/v1/jobs/{request_id}")
        seen = time.time()
        if code == 200 and body.get("status") in statuses:
            return body["status"], seen
    raise BenchError(f"run {request_id} did not become one of {sorted(statuses)} within {timeout}s")


def cpu_between(server: Server, before: dict[str, float], request_ids: list[str]) -> dict[str, float]:
    """The tree's CPU since `before` per run: its own plus its reaped children's (bwrap, probes),
    less the fake's own CPU when the engine runs unconfined, as the shared driver does: the worker
    reaps an unconfined engine. A sandboxed one never reaches the tree: bwrap runs it under the
    init of a new PID namespace and the outer bwrap exits without waiting for that init, so
    subtracting it would take out CPU that was never counted. The fake's own CPU is kept beside
    the figure (`engine_ms_per_run`)."""
    after = server.cpu()
    engine, exits = server.engine_cpu(request_ids)
    own, reaped = after["own_s"] - before["own_s"], after["reaped_s"] - before["reaped_s"]
    counted_engine = 0.0 if server.confined else engine
    runs = max(1, len(request_ids))
    return {
        "window_s": after["t"] - before["t"],
        "own_s": own,
        "reaped_s": reaped,
        "engine_s": engine,
        "engine_exits": exits,
        "ms_per_run": (own + reaped - counted_engine) * 1000 / runs,
        "engine_ms_per_run": engine * 1000 / runs,
    }


# --- phases ---------------------------------------------------------------------------------------


def idle(server: Server, settle: float, window: float) -> dict[str, Any]:
    """Memory after `settle` seconds of quiet, then CPU over `window` seconds, % of one core."""
    time.sleep(settle)
    memory = server.memory()
    before = server.cpu()
    time.sleep(window)
    after = server.cpu()
    used = after["own_s"] + after["reaped_s"] - before["own_s"] - before["reaped_s"]
    return {"memory": memory, "cpu_percent": 100 * used / (after["t"] - before["t"])}


def sequential(server: Server, runs: int, warmup: int) -> dict[str, Any]:
    """Auto runs one at a time: (a) POST returned -> engine start, (b) POST sent -> succeeded seen."""
    api = server.api()
    rows = []
    for index in range(warmup + runs):
        if index == warmup:
            cpu_before, rows = server.cpu(), []
        request_id, sent, returned = create(api, auto_job())
        status, seen = poll(api, request_id, TERMINAL, server.poll)
        start, exit_ = server.turns(request_id, [("start", "exec"), ("exit", "exec")])
        if status != "succeeded":
            raise BenchError(f"auto run {request_id} ended {status}")
        code, result = api.get(f"/v1/jobs/{request_id}/result")
        if code != 200 or result["result"].get("data") != HAIKU:
            raise BenchError(f"auto run {request_id} succeeded without the fake's answer: {code} {result}")
        rows.append(
            {
                "request_id": request_id,
                "post_latency": returned - sent,
                "a_post_returned_to_engine_start": start["t_proc"] - returned,
                "post_sent_to_engine_start": start["t_proc"] - sent,
                "engine_runtime": exit_["t"] - start["t_proc"],
                "engine_exit_to_succeeded_seen": seen - exit_["t"],
                "b_post_sent_to_succeeded_seen": seen - sent,
                "post_returned_to_succeeded_seen": seen - returned,
            }
        )
    cpu = cpu_between(server, cpu_before, [row["request_id"] for row in rows])
    last = rows[-1]["request_id"]
    gets = {
        name: _get_latency(api, f"/v1/jobs/{last}{path}", 100) for name, path in (("status", ""), ("result", "/result"))
    }
    api.close()
    keys = [key for key in rows[0] if key != "request_id"]
    return {
        "stats": {key: summary([row[key] for row in rows]) for key in keys},
        "cpu": cpu,
        "get_latency": gets,
        "rows": rows,
    }


def _get_latency(api: Api, path: str, samples: int) -> dict[str, float | int]:
    took = []
    for _ in range(samples):
        began = time.perf_counter()
        api.get(path)
        took.append(time.perf_counter() - began)
    return summary(took)


def interactive(server: Server, runs: int, warmup: int) -> dict[str, Any]:
    """trip-planner runs one at a time: (c) the asking turn's exit -> waiting_user seen,
    (d) reply sent (and returned) -> resumed engine start."""
    api = server.api()
    rows = []
    for index in range(warmup + runs):
        if index == warmup:
            rows = []
        request_id, sent, returned = create(api, INTERACTIVE_JOB)
        status, waiting = poll(api, request_id, TERMINAL | {"waiting_user"}, server.poll)
        if status != "waiting_user":
            raise BenchError(f"interactive run {request_id} became {status}, not waiting_user")
        first_start, first_exit = server.turns(request_id, [("start", "exec"), ("exit", "exec")])
        code, pending = api.get(f"/v1/jobs/{request_id}/interaction/pending")
        interaction = (pending.get("pending") or {}).get("interaction_id") if code == 200 else None
        reply_sent = time.time()
        code, answer = api.post(
            f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": interaction, "response": REPLY}
        )
        reply_returned = time.time()
        if code != 200:
            raise BenchError(f"reply to {request_id} answered {code}: {answer}")
        status, done = poll(api, request_id, TERMINAL, server.poll)
        if status != "succeeded":
            raise BenchError(f"interactive run {request_id} ended {status}")
        start, exit_ = server.turns(request_id, [("start", "resume"), ("exit", "resume")])
        rows.append(
            {
                "request_id": request_id,
                "post_returned_to_engine_start": first_start["t_proc"] - returned,
                "c_engine_exit_to_waiting_user_seen": waiting - first_exit["t"],
                "post_sent_to_waiting_user_seen": waiting - sent,
                "reply_latency": reply_returned - reply_sent,
                "d_reply_sent_to_resumed_start": start["t_proc"] - reply_sent,
                "d_reply_returned_to_resumed_start": start["t_proc"] - reply_returned,
                "resumed_exit_to_succeeded_seen": done - exit_["t"],
                "reply_sent_to_succeeded_seen": done - reply_sent,
            }
        )
    api.close()
    keys = [key for key in rows[0] if key != "request_id"]
    return {"stats": {key: summary([row[key] for row in rows]) for key in keys}, "rows": rows}


def burst(server: Server, runs: int, period: float, timeout: float = 300.0) -> dict[str, Any]:
    """`runs` auto runs POSTed at once (a connection and thread each, released by one barrier);
    one client then GETs every unfinished run per round of `period` until all are terminal.
    runs/s = runs seen terminal / (first POST sent -> last terminal seen)."""
    clients = [server.api() for _ in range(runs)]
    for client in clients:
        client.get("/v1/system/ping")  # connected before the release
    gate = threading.Barrier(runs)
    created: list[Any] = [None] * runs

    def submit(index: int) -> None:
        gate.wait()
        try:
            created[index] = create(clients[index], auto_job())
        except Exception as error:  # counted as a refused submission below
            created[index] = error

    threads = [threading.Thread(target=submit, args=(index,), daemon=True) for index in range(runs)]
    cpu_before = server.cpu()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    accepted = [item for item in created if isinstance(item, tuple)]
    refused = [repr(item)[:200] for item in created if not isinstance(item, tuple)]
    if not accepted:
        raise BenchError(f"every submission failed: {refused[:3]}")
    first_sent = min(sent for _, sent, _ in accepted)
    pending = {request_id: returned for request_id, _, returned in accepted}
    ended: dict[str, tuple[str, float]] = {}
    observer = clients[0]
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        round_began = time.monotonic()
        for request_id in list(pending):
            code, body = observer.get(f"/v1/jobs/{request_id}")
            if code == 200 and body.get("status") in TERMINAL:
                ended[request_id] = (body["status"], time.time())
                del pending[request_id]
        time.sleep(max(0.0, period - (time.monotonic() - round_began)) if pending else 0)
    for client in clients:
        client.close()
    ids = [request_id for request_id, _, _ in accepted]
    cpu = cpu_between(server, cpu_before, ids)
    last_seen = max(at for _, at in ended.values())
    records = [r for request_id in ids for r in fake_records(server.data_dir / "runs" / request_id)]
    return {
        "runs_per_s": len(ended) / (last_seen - first_sent),
        "seconds": last_seen - first_sent,
        "refused": len(refused),
        "refusals": refused[:3],
        "not_terminal": len(pending),
        "not_succeeded": sum(1 for status, _ in ended.values() if status != "succeeded"),
        "post_latency": summary([returned - sent for _, sent, returned in accepted]),
        "max_concurrent_engines": _most_at_once(records),
        "cpu": cpu,
    }


def _most_at_once(records: list[dict[str, Any]]) -> int:
    changes = sorted((r["t_proc"], 1) if r["ev"] == "start" else (r["t"], -1) for r in records)
    running = most = 0
    for _, step in changes:
        running += step
        most = max(most, running)
    return most


def measure(server: Server, args: Any, delay_burst: bool) -> dict[str, Any]:
    """Every phase against one running service: idle, one at a time, at once."""
    result: dict[str, Any] = {"loadavg_before": loadavg()}
    result["idle"] = idle(server, args.settle, args.idle_seconds)
    result["sequential"] = sequential(server, args.seq, args.warmup)
    result["interactive"] = interactive(server, args.inter, args.warmup)
    result["burst"] = burst(server, args.burst, args.burst_poll_ms / 1000)
    time.sleep(args.settle)
    result["memory_after_burst"] = server.memory()
    if delay_burst and args.delay_burst_ms:
        server.fake.configure(delay_ms=args.delay_burst_ms)
        try:
            result["delay_burst"] = burst(server, args.burst, args.burst_poll_ms / 1000)
        finally:
            server.fake.configure(delay_ms=0)
    result["loadavg_after"] = loadavg()
    return result
