"""The measurements, each driving the running service over /v1 HTTP and the run websocket.

Latencies are wall-clock (time.time() here, `date +%s.%N` in the engine: the same clock on one
machine). Samples run one after the other on an otherwise idle service, so each measures the
path of one run, not queueing behind others; (e) and (f) measure load.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.service_processes import ServiceProcesses
from tests.support.wsclient import Closed, WebSocket

from .engine import ACTIVITY_LINES, ACTIVITY_MARK, read_times
from .httpclient import Api
from .system import cpu_seconds

TERMINAL = {"succeeded", "failed", "canceled"}
POLL_INTERVAL = 0.01  # a tight client poll of GET /v1/jobs/{id}
WAIT_TIMEOUT = 60.0


def auto_job() -> dict[str, Any]:
    """An auto run; the topic is unique so the result cache never answers it in place of a turn."""
    return {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": f"bench {uuid.uuid4().hex}"}}


INTERACTIVE_JOB = {"skill_id": "trip-planner", "engine": "codex", "runtime_options": {"execution_mode": "interactive"}}


class BenchError(AssertionError):
    """The service did something a benchmark cannot measure around (a failed run, a timeout)."""


@dataclass
class Target:
    name: str
    service: ServiceProcesses
    engine: Path
    token: str

    def api(self) -> Api:
        return Api("127.0.0.1", self.service.port, self.token)

    def socket(self, request_id: str) -> WebSocket:
        return WebSocket(self.service.port, f"/ws/runs/{request_id}/", {"Authorization": f"Token {self.token}"})

    def run_dir(self, request_id: str) -> Path:
        return self.service.data_dir / "runs" / request_id

    def pgids(self) -> set[int]:
        return {process.pid for process in [self.service.web, *self.service.workers] if process is not None}


@dataclass
class Samples:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(value)


# --- observing a run ------------------------------------------------------------------------


def create(api: Api, body: dict[str, Any]) -> tuple[str, float, float]:
    sent = time.time()
    status, created = api.post("/v1/jobs", body)
    returned = time.time()
    if status != 200:
        raise BenchError(f"POST /v1/jobs answered {status}: {created}")
    return created["request_id"], sent, returned


def poll_until(api: Api, request_id: str, statuses: set[str], timeout: float = WAIT_TIMEOUT) -> tuple[dict, float]:
    """GET /v1/jobs/{id} every POLL_INTERVAL until the status is one of `statuses`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = api.get(f"/v1/jobs/{request_id}")
        seen = time.time()
        if status == 200 and body.get("status") in statuses:
            return body, seen
        time.sleep(POLL_INTERVAL)
    raise BenchError(f"run {request_id} did not become {sorted(statuses)} within {timeout}s")


class RunWatcher:
    """The run socket from a client's side: the time each status and the pending prompt arrived."""

    def __init__(self, target: Target, request_id: str):
        self.request_id = request_id
        self.ws = target.socket(request_id)
        self.status_at: dict[str, float] = {}
        self.pending_at: dict[int, float] = {}
        self.closed = False

    def _note(self, message: dict[str, Any], now: float) -> None:
        if message.get("type") == "snapshot":
            self.status_at.setdefault(message["run"]["status"], now)
            if message.get("pending"):
                self.pending_at.setdefault(message["pending"]["interaction_id"], now)
        elif message.get("type") == "event":
            if message["kind"] == "status":
                self.status_at.setdefault(message["payload"]["to"], now)
            elif message["kind"] == "interaction_pending":
                self.pending_at.setdefault(message["payload"]["interaction_id"], now)

    def until(self, done: Callable[[RunWatcher], bool], timeout: float = WAIT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not done(self):
            if self.closed:
                raise BenchError(f"run socket of {self.request_id} closed before the awaited event")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"run socket of {self.request_id}: nothing awaited within {timeout}s")
            try:
                message = self.ws.recv(remaining)
            except TimeoutError:
                continue  # the deadline check above reports it
            except (Closed, OSError):  # the run ended and the server closed the socket
                self.closed = True
                continue
            self._note(message, time.time())

    def terminal(self) -> tuple[str, float]:
        self.until(lambda w: bool(TERMINAL & w.status_at.keys()))
        status = next(s for s in self.status_at if s in TERMINAL)
        return status, self.status_at[status]

    def close(self) -> None:
        self.ws.close()


def _stamps(target: Target, request_id: str, turns: int) -> dict[str, list[float]]:
    """The engine's stamps; the exit stamp is written just before exit, so give it a moment."""
    deadline = time.monotonic() + 5
    while True:
        times = read_times(target.run_dir(request_id))
        if len(times["start"]) >= turns and len(times["exit"]) >= turns:
            return times
        if time.monotonic() > deadline:
            raise BenchError(f"run {request_id}: engine stamps missing ({times})")
        time.sleep(0.01)


# --- where the time goes: the run's own event times against the engine's stamps --------------


def _event_times(api: Api, request_id: str) -> list[tuple[str, Any, float]]:
    """(kind, status `to` or None, server time) of each event; read after the run, untimed."""
    status, body = api.get(f"/v1/jobs/{request_id}/events/history?after_seq=0")
    if status != 200:
        raise BenchError(f"event history of {request_id} answered {status}: {body}")
    return [(e["kind"], e["payload"].get("to"), datetime.fromisoformat(e["ts"]).timestamp()) for e in body["events"]]


def timeline(
    api: Api, request_id: str, turn_start: float, turn_exit: float, samples: Samples, attempt: int = 1
) -> tuple[float, float] | None:
    """Split one turn at the worker's own event times: claimed (status -> running), engine
    started and exited (stamps), decided (the `result` or `interaction_pending` event)."""
    events = _event_times(api, request_id)
    running = [ts for kind, to, ts in events if kind == "status" and to == "running"]
    decided = [ts for kind, _, ts in events if kind in ("result", "interaction_pending")]
    if len(running) < attempt or len(decided) < attempt:
        return None
    samples.add("t_claim_to_spawn", turn_start - running[attempt - 1])
    samples.add("t_exit_to_decided", decided[attempt - 1] - turn_exit)
    return running[attempt - 1], decided[attempt - 1]


# --- (a), (b): auto runs --------------------------------------------------------------------


def auto_sample(target: Target, api: Api, observe: str, samples: Samples) -> None:
    request_id, sent, returned = create(api, auto_job())
    if observe == "ws":
        watcher = RunWatcher(target, request_id)
        try:
            status, done_at = watcher.terminal()
        finally:
            watcher.close()
    else:
        body, done_at = poll_until(api, request_id, TERMINAL)
        status = body["status"]
    if status != "succeeded":
        raise BenchError(f"auto run {request_id} ended {status}: {api.get(f'/v1/jobs/{request_id}')[1]}")
    times = _stamps(target, request_id, 1)
    samples.add("post_rtt", returned - sent)
    samples.add("a", times["start"][0] - returned)
    samples.add(f"b_{observe}", done_at - sent)
    samples.add("engine_exit_to_done_" + observe, done_at - times["exit"][0])
    marks = timeline(api, request_id, times["start"][0], times["exit"][0], samples)
    if marks:
        samples.add("t_returned_to_claim", marks[0] - returned)
        samples.add("t_decided_to_seen_" + observe, done_at - marks[1])


# --- (c), (d): interactive runs ---------------------------------------------------------------


def interactive_sample(target: Target, api: Api, observe: str, samples: Samples) -> None:
    request_id, sent, returned = create(api, INTERACTIVE_JOB)
    watcher = RunWatcher(target, request_id) if observe == "ws" else None
    try:
        if watcher is not None:
            watcher.until(lambda w: "waiting_user" in w.status_at and 1 in w.pending_at)
            waiting_at, prompt_at = watcher.status_at["waiting_user"], watcher.pending_at[1]
        else:
            _, waiting_at = poll_until(api, request_id, {"waiting_user"} | TERMINAL)
            prompt_at = None
        first = _stamps(target, request_id, 1)
        reply_sent = time.time()
        status, answer = api.post(
            f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Lisbon, in spring"}
        )
        reply_returned = time.time()
        if status != 200:
            raise BenchError(f"reply to {request_id} answered {status}: {answer}")
        if watcher is not None:
            final, done_at = watcher.terminal()
        else:
            body, done_at = poll_until(api, request_id, TERMINAL)
            final = body["status"]
    finally:
        if watcher is not None:
            watcher.close()
    if final != "succeeded":
        raise BenchError(f"interactive run {request_id} ended {final}: {api.get(f'/v1/jobs/{request_id}')[1]}")
    times = _stamps(target, request_id, 2)
    marks = timeline(api, request_id, times["start"][1], times["exit"][1], samples, attempt=2)
    if marks:
        samples.add("t_reply_returned_to_claim", marks[0] - reply_returned)
    samples.add("a_interactive", first["start"][0] - returned)
    samples.add(f"c_waiting_{observe}", waiting_at - first["exit"][0])
    if prompt_at is not None:
        samples.add("c_prompt_ws", prompt_at - first["exit"][0])
    samples.add("reply_rtt", reply_returned - reply_sent)
    samples.add("d", times["start"][1] - reply_returned)
    samples.add(f"reply_to_done_{observe}", done_at - reply_sent)


def latencies(target: Target, auto_samples: int, interactive_samples: int, warmup: int = 3) -> Samples:
    """Alternating client styles (tight GET polling, websocket), one run at a time."""
    api = target.api()
    discard = Samples()
    for index in range(warmup):  # engine probes, imports, first connections
        auto_sample(target, api, ("poll", "ws")[index % 2], discard)
        interactive_sample(target, api, ("poll", "ws")[index % 2], discard)
    samples = Samples()
    for index in range(auto_samples):
        auto_sample(target, api, ("poll", "ws")[index % 2], samples)
    for index in range(interactive_samples):
        interactive_sample(target, api, ("poll", "ws")[index % 2], samples)
    api.close()
    return samples


# --- R-AC3: engine stdout line -> activity event on the websocket ------------------------------


def activity_latency(target: Target, runs: int) -> list[float]:
    """Seconds from the bench engine printing a tool-start line (stamped with the time it was
    printed) to its `activity` event arriving on a websocket client, one run at a time. Lines
    printed before the socket's snapshot arrived are replayed history, not live: not counted."""
    api = target.api()
    delays: list[float] = []
    try:
        for _ in range(runs):
            body = auto_job()
            body["input"]["topic"] = f"{ACTIVITY_MARK} {uuid.uuid4().hex}"
            request_id, _, _ = create(api, body)
            ws = target.socket(request_id)
            try:
                live_from = None
                seen = 0
                deadline = time.monotonic() + WAIT_TIMEOUT
                while seen < ACTIVITY_LINES and time.monotonic() < deadline:
                    message = ws.recv(max(0.1, deadline - time.monotonic()))
                    now = time.time()
                    if message.get("type") == "snapshot":
                        live_from = now
                        continue
                    payload = message.get("payload") or {}
                    if message.get("kind") != "activity" or payload.get("type") != "tool":
                        continue
                    seen += 1
                    printed = float(payload["command"].split()[1])
                    if live_from is not None and printed >= live_from:
                        delays.append(now - printed)
            finally:
                ws.close()
            if seen < ACTIVITY_LINES:
                raise BenchError(f"run {request_id}: {seen} of {ACTIVITY_LINES} activity events arrived")
            poll_until(api, request_id, TERMINAL)
    finally:
        api.close()
    return delays


# --- (g): webhooks ---------------------------------------------------------------------------


def webhook_latencies(target: Target, runs: int) -> Samples:
    """R-NT1: status event committed (its server time) -> signed delivery received here, for
    run.waiting_user and, after the reply, run.succeeded; one interactive run at a time."""
    from tests.support.webhook_receiver import WebhookReceiver

    api = target.api()
    samples = Samples()
    with WebhookReceiver() as receiver:
        status, hook = api.post("/v1/webhooks", {"url": receiver.url, "events": ["run.waiting_user", "run.succeeded"]})
        if status != 201:
            raise BenchError(f"webhook registration answered {status}: {hook}")
        try:
            for _ in range(runs):
                request_id, _, _ = create(api, INTERACTIVE_JOB)
                arrived = _delivery(receiver, request_id, "run.waiting_user")
                api.post(f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Lisbon"})
                finished = _delivery(receiver, request_id, "run.succeeded")
                committed = {to: at for kind, to, at in _event_times(api, request_id) if kind == "status"}
                samples.add("webhook_waiting", arrived - committed["waiting_user"])
                samples.add("webhook_succeeded", finished - committed["succeeded"])
        finally:
            api.request("DELETE", f"/v1/webhooks/{hook['id']}")
            api.close()
    return samples


def _delivery(receiver, request_id: str, event: str) -> float:
    deadline = time.monotonic() + WAIT_TIMEOUT
    while time.monotonic() < deadline:
        for item in list(receiver.received):
            if item.json["request_id"] == request_id and item.json["event"] == event:
                return item.at
        time.sleep(0.002)
    raise BenchError(f"no {event} delivery for {request_id} within {WAIT_TIMEOUT}s")


# --- (e): throughput --------------------------------------------------------------------------


def _count(api: Api, status: str) -> int:
    """The caller's runs in `status`; an observer's failed read is retried (and reported)."""
    for attempt in range(5):
        code, body = api.get(f"/v1/jobs?status={status}&page_size=1")
        if code == 200:
            return int(body["count"])
        print(f"observer: GET /v1/jobs?status={status} answered {code}, retrying", flush=True)
        time.sleep(0.2 * (attempt + 1))
    raise BenchError(f"GET /v1/jobs?status={status} answered {code}: {body}")


class ConnectionCounter:
    """Peak number of PostgreSQL connections to the service's database, sampled every 20 ms."""

    def __init__(self, target: Target):
        self.url = target.service.database_url if target.service.database_url.startswith("postgres") else ""
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psycopg

        name = self.url.rsplit("/", 1)[1]
        with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            while not self._stop.wait(0.02):
                (count,) = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
                self.peak = max(self.peak, count)

    def __enter__(self) -> ConnectionCounter:
        if self.url:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


def burst(target: Target, runs: int, timeout: float = 120.0) -> dict[str, float]:
    """`runs` auto runs submitted at once (one connection and thread each, released together);
    the clock runs from the release to the last run observed terminal (list endpoint, 20 Hz)."""
    observer = target.api()
    before = {status: _count(observer, status) for status in TERMINAL}
    clients = [target.api() for _ in range(runs)]
    for client in clients:
        client.get("/v1/system/ping")  # open the connections before the clock starts
    gate = threading.Barrier(runs + 1)
    answers: list[Any] = [None] * runs
    jobs = [auto_job() for _ in range(runs)]
    returned: list[float] = [0.0] * runs

    def submit(index: int) -> None:
        gate.wait()
        try:
            answers[index] = clients[index].post("/v1/jobs", jobs[index])
        except Exception as exc:  # reported below as a failed submission
            answers[index] = (None, repr(exc))
        returned[index] = time.time()

    threads = [threading.Thread(target=submit, args=(index,), daemon=True) for index in range(runs)]
    for thread in threads:
        thread.start()
    web, worker = target.service.web.pid, target.service.workers[0].pid
    cpu_before = {"web": cpu_seconds(web), "worker": cpu_seconds(worker)}
    with ConnectionCounter(target) as connections:
        gate.wait()
        released = time.time()
        for thread in threads:
            thread.join(timeout)
        time.sleep(0.1)
    refused = [answer for answer in answers if not answer or answer[0] != 200]
    if len(refused) == runs:
        raise BenchError(f"every submission failed: {refused[:3]}")
    if refused:  # reported with the result: a refused submission is a finding, not a reason to stop
        print(
            f"[{target.name}] burst: {len(refused)} of {runs} submissions failed, e.g. {str(refused[0])[:200]}",
            flush=True,
        )
    accepted = runs - len(refused)
    deadline = time.monotonic() + timeout
    while True:
        done = {status: _count(observer, status) - before[status] for status in TERMINAL}
        finished_at = time.time()
        if sum(done.values()) >= accepted:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"burst: only {done} of {accepted} runs ended within {timeout}s")
        time.sleep(0.05)
    cpu_after = {"web": cpu_seconds(web), "worker": cpu_seconds(worker)}
    for client in [observer, *clients]:
        client.close()
    if done["succeeded"] != accepted:
        raise BenchError(f"burst: not every run succeeded: {done}")
    return {
        "runs_per_s": accepted / (finished_at - released),
        "refused": len(refused),
        "seconds": finished_at - released,
        "submitted_s": max(returned) - released,
        "peak_db_connections": connections.peak,
        # CPU per run (ms): web, worker tree, and the engines the worker reaped. The observer's
        # polling (20 Hz) is in the web figure; the database and Redis servers are not counted.
        "cpu_ms_per_run": {
            "web": (cpu_after["web"]["own"] - cpu_before["web"]["own"]) * 1000 / accepted,
            "worker": (cpu_after["worker"]["own"] - cpu_before["worker"]["own"]) * 1000 / accepted,
            "engines": (cpu_after["worker"]["children"] - cpu_before["worker"]["children"]) * 1000 / accepted,
        },
    }


# --- (f): memory ------------------------------------------------------------------------------


def held_slots(target: Target) -> tuple[int, int]:
    """(runs holding a slot, runs running) straight from the database: the API does not show slots."""
    query = "SELECT SUM(CASE WHEN holds_slot THEN 1 ELSE 0 END), SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END) FROM runs_run"
    url = target.service.database_url
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute(query).fetchone()
    else:
        path = target.service.data_dir / "skillrunner.sqlite3"
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as conn:
            row = conn.execute(query).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def park_waiting(target: Target, runs: int, clients: int = 4, timeout: float = 300.0) -> dict[str, float]:
    """Submit `runs` interactive runs (backing off on 429 queue-full) until all wait for a reply."""
    observer = target.api()
    baseline = _count(observer, "waiting_user")
    remaining = [runs]
    lock = threading.Lock()
    errors: list[str] = []
    started = time.time()
    deadline = time.monotonic() + timeout

    def submitter() -> None:
        api = target.api()
        while time.monotonic() < deadline:
            with lock:
                if remaining[0] <= 0 or errors:
                    break
                remaining[0] -= 1
            while time.monotonic() < deadline:
                status, body = api.post("/v1/jobs", INTERACTIVE_JOB)
                if status == 200:
                    break
                if status != 429:
                    errors.append(f"{status}: {body}")
                    return
                time.sleep(0.2)  # the queue is full (SKILLRUNNER_MAX_QUEUED_RUNS): let it drain
        api.close()

    threads = [threading.Thread(target=submitter, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if errors:
        raise BenchError(f"parking runs: {errors[:3]}")
    while True:
        waiting = _count(observer, "waiting_user") - baseline
        if waiting >= runs:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"only {waiting} of {runs} runs reached waiting_user within {timeout}s")
        time.sleep(0.5)
    parked_at = time.time()
    observer.close()
    return {"seconds": parked_at - started, "runs_per_s": runs / (parked_at - started)}


def memory_with_waiting(
    target: Target, runs: int, memory: Callable[[], dict[str, float]], engine_pids: Callable[[], list[int]]
) -> dict[str, Any]:
    """(f): `runs` interactive runs parked in waiting_user hold no engine process and no slot;
    the service's memory with them parked."""
    parked = park_waiting(target, runs)
    time.sleep(2.0)  # let the last turns' bookkeeping finish
    engines = engine_pids()
    slots, running = held_slots(target)
    if engines or slots or running:
        raise BenchError(
            f"{runs} waiting runs still hold resources: engine pids {engines}, {slots} slots, {running} running"
        )
    return {"parked": parked, "memory": memory(), "engines_alive": len(engines), "slots_held": slots}
