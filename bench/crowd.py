"""R-SC2: many open websockets and event streams on one web process, measured from outside.

    .venv/bin/python -m bench.crowd [--setups embedded,scaleout,scaleout-2webs] [--connections 1000]
        [--runs 4] [--rounds 10] [--idle-seconds 30] [--inbox 20] [--users 20]

`make bench` runs it too, for its configurations (`--crowd N`, 0 skips). For each setup a fresh
service (tests.support.service_processes: daphne and one `manage.py worker`) on a fresh database;
`scaleout-2webs` adds a second daphne on the same PostgreSQL and Redis. `--runs` haiku-writer runs
each hold a turn of the bench engine in its crowd mode (bench/engine.py): it waits on a FIFO in its
run directory and prints one tool line per line written there, which the worker turns into an
`activity` event of that run, as it does with any engine's output.

The client is this process: one asyncio loop holding every connection, over plain HTTP/1.0 for
the event streams and a minimal websocket framing of its own (it answers the server's pings), so
a connection costs it one buffer and each arrival one timestamp. Half the connections are
websockets (`/ws/runs/<id>/`, `--inbox` of them `/ws/inbox/`), half event streams (four in five
`/v1/jobs/<id>/events?after_seq=`, one in five upstream's `/v1/jobs/<id>/events?cursor=`), spread
evenly over the runs, over `--users` staff users (who may follow any run) and, with two webs,
alternately over both. The per-user cap (SKILLRUNNER_USER_MAX_STREAMS) is raised to let them in.

- idle: over `--idle-seconds`, first with one connection per web process, then with all of them:
  the CPU of each web process (/proc/<pid>/stat) and the database's work. On PostgreSQL that is
  pg_stat_database of the service's database (transactions and rows read; web and worker
  together). SQLite has no outside counter of statements, so there it is the web process's system
  calls on the database's three files (`strace -f -c -P`: the locks, reads and writes each
  statement makes), which the worker's do not enter.
- fan-out: `--rounds` rounds a second apart; each writes one line to every run's FIFO at once, so
  every run connection has one new event to receive. A receipt is timed from the event's
  created_at (the worker's clock, set just before its transaction commits; one machine, one clock)
  to the arrival of the bytes that complete it here; also from the bench's FIFO write.
- memory: RSS and PSS (/proc/<pid>/smaps_rollup) of each web process with no connection, one, and
  all: KiB per idle connection from the last two.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.service_processes import PYTHON, REPO, ServiceProcesses, free_port

from . import report
from .engine import CROWD_MARK, CROWD_TRIGGER, write_engine
from .profiling import Profiler
from .services import CONFIGS, bench_service, loadavg, wait_ready

# setup -> (configuration, web processes)
SETUPS = {"embedded": ("embedded", 1), "scaleout": ("scaleout", 1), "scaleout-2webs": ("scaleout", 2)}
OPEN_AT_ONCE = 25  # connections being opened at a time
OPEN_TIMEOUT = 60.0
# After opening connections, before an idle window: PostgreSQL's backends report their counters
# up to 10 s late once idle, and the opening's must not count as idle work.
SETTLE_SECONDS = 12.0
ROUND_TIMEOUT = 20.0
ROUND_GAP_SECONDS = 1.0
UPSTREAM_SHARE = 5  # one event stream in this many is upstream's


# --- the client's connections ----------------------------------------------------------------


class Connection(asyncio.Protocol):
    """One connection from the client's side: its request, then what the service sends after the
    response head (`body`: the stream's bytes, or a websocket's text messages one after another),
    with the time each piece of it arrived."""

    expected_status = 200

    def __init__(self, kind: str, port: int, path: str, token: str, run: str | None):
        self.kind, self.port, self.path, self.run = kind, port, path, run
        self.request = self.request_head(port, path, token)
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()
        self.status: int | None = None
        self.body = bytearray()
        self.arrivals: list[tuple[int, float]] = []  # (len(body) after, arrival time)
        self.closed = False

    def request_head(self, port: int, path: str, token: str) -> bytes:
        # HTTP/1.0: the body comes as it is written, without chunked framing.
        return (
            f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Token {token}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def connection_lost(self, exc) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if self.status is None:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(self.head.split(b" ", 2)[1])
            data = bytes(self.head[end + 4 :])
            del self.head[end + 4 :]
        if data:
            self.take(data, now)

    def take(self, data: bytes, now: float) -> None:
        self.body += data
        self.arrivals.append((len(self.body), now))

    def established(self) -> bool:
        """Whether the service listens for this connection's run now: a stream sends its first
        bytes (the replayed last event, upstream's snapshot) from inside its listener."""
        return b"\n\n" in self.body

    def receipt(self, marker: bytes, start: int) -> float | None:
        """When the first `marker` after body offset `start` had arrived in full."""
        found = self.body.find(marker, start)
        if found < 0:
            return None
        index = bisect.bisect_left(self.arrivals, found + len(marker), key=lambda arrival: arrival[0])
        return self.arrivals[index][1]

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Socket(Connection):
    """A websocket client: the upgrade, then the server's frames; text messages go to `body`."""

    expected_status = 101

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.frames = bytearray()
        self.messages = 0

    def request_head(self, port: int, path: str, token: str) -> bytes:
        key = base64.b64encode(os.urandom(16)).decode()
        return (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Token {token}\r\n\r\n"
        ).encode()

    def take(self, data: bytes, now: float) -> None:
        frames = self.frames
        frames += data
        while len(frames) >= 2:
            opcode, length, offset = frames[0] & 0x0F, frames[1] & 0x7F, 2
            if length == 126:
                length, offset = int.from_bytes(frames[2:4]), 4
            elif length == 127:
                length, offset = int.from_bytes(frames[2:10]), 10
            if len(frames) < offset + length:
                return
            payload = bytes(frames[offset : offset + length])
            del frames[: offset + length]
            if opcode in (0, 1):  # text, or the continuation of a fragmented one
                self.messages += opcode == 1
                super().take(payload, now)
            elif opcode == 9:  # ping: answer with a masked pong carrying its payload
                mask = os.urandom(4)
                masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
                assert self.transport is not None
                self.transport.write(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)
            elif opcode == 8:
                self.close()

    def established(self) -> bool:
        # A run socket sends its snapshot, then (from inside its listener) the replayed last
        # event; the inbox socket its first count from inside its listener.
        return self.messages >= (1 if self.kind == "inbox" else 2)


@dataclass
class Plan:
    """Which connections to open, where."""

    ports: list[int]
    tokens: list[str]  # of staff users, who may follow any run
    runs: dict[str, int]  # request id -> its last event's seq when the plan was made
    connections: int
    inbox: int

    def connection(self, kind: str, run: str, port: int, token: str) -> Connection:
        since = self.runs[run] - 1  # the last event is replayed: the sign that the listener is in place
        if kind == "socket":
            return Socket(kind, port, f"/ws/runs/{run}/?after_seq={since}", token, run)
        if kind == "inbox":
            return Socket(kind, port, "/ws/inbox/", token, None)
        query = f"cursor={since}" if kind == "upstream" else f"after_seq={since}"
        return Connection(kind, port, f"/v1/jobs/{run}/events?{query}", token, run)

    def baseline(self) -> list[Connection]:
        """One run socket on each web process."""
        first = next(iter(self.runs))
        return [self.connection("socket", first, port, self.tokens[0]) for port in self.ports]

    def rest(self) -> list[Connection]:
        """The other connections, kinds interleaved evenly, each kind's spread over the runs."""
        total = self.connections - len(self.ports)
        sockets = total // 2
        streams = total - sockets
        upstream = streams // UPSTREAM_SHARE
        counts = {
            "socket": sockets - min(self.inbox, sockets),
            "inbox": min(self.inbox, sockets),
            "stream": streams - upstream,
            "upstream": upstream,
        }
        order = sorted(((index + 0.5) / count, kind, index) for kind, count in counts.items() for index in range(count))
        runs = list(self.runs)
        return [
            self.connection(
                kind,
                runs[index % len(runs)],
                self.ports[position % len(self.ports)],
                self.tokens[position % len(self.tokens)],
            )
            for position, (_, kind, index) in enumerate(order)
        ]


async def open_all(connections: list[Connection]) -> float:
    """Open `connections`, OPEN_AT_ONCE at a time, each until established; seconds taken."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    gate = asyncio.Semaphore(OPEN_AT_ONCE)

    async def open_one(connection: Connection) -> None:
        async with gate:
            await loop.create_connection(lambda: connection, "127.0.0.1", connection.port)
            deadline = time.monotonic() + OPEN_TIMEOUT
            while not connection.established():
                if connection.closed or connection.status not in (None, connection.expected_status):
                    raise RuntimeError(
                        f"{connection.path} on port {connection.port}: {connection.head.decode(errors='replace')}"
                        f"{connection.body[:300].decode(errors='replace')}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{connection.path} not established within {OPEN_TIMEOUT}s")
                await asyncio.sleep(0.01)

    await asyncio.gather(*(open_one(connection) for connection in connections))
    return time.monotonic() - started


# --- what the service's processes and database did -------------------------------------------


def _stat_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def memory_kib(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            values[name.lower() + "_kib"] = int(rest.split()[0])
    return values


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


PG_COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
)


def pg_counters(database_url: str) -> dict[str, int]:
    """The service database's counters, read over a connection to another database of the server
    (so that reading them adds nothing to them)."""
    import psycopg

    base, name = database_url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        row = conn.execute(
            f"SELECT {', '.join(PG_COUNTERS)} FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
    assert row is not None, name
    return dict(zip(PG_COUNTERS, row, strict=True))


_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$")


def strace_counts(text: str) -> dict[str, int]:
    """The calls column of `strace -c` by system call (without the total row)."""
    counts = {}
    for line in text.splitlines():
        match = _STRACE_ROW.match(line)
        if match and match.group(3) != "total":
            counts[match.group(3)] = int(match.group(1))
    return counts


@dataclass
class Crowd:
    """A started service and what the bench knows of it."""

    setup: str
    service: ServiceProcesses
    webs: list[tuple[subprocess.Popen, int]]  # (process, port), the first the service's own
    tokens: list[str]  # the first one's user owns the runs
    sqlite: Path | None
    runs: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:  # what bench.profiling names its files after
        return self.setup

    @property
    def pids(self) -> list[int]:
        return [process.pid for process, _ in self.webs]

    async def idle(self, seconds: float) -> dict[str, Any]:
        """CPU of each web process and the database's work over `seconds` of nothing happening."""
        tracers = []
        if self.sqlite is not None and shutil.which("strace"):  # without it, that row shows "-"
            files = [str(self.sqlite) + suffix for suffix in ("", "-wal", "-shm")]
            for pid in self.pids:
                out = self.service.data_dir / f"strace-{pid}-{time.monotonic_ns()}.txt"
                argv = ["strace", "-f", "-c", "-qq", "-o", str(out), *(f"-P{path}" for path in files), "-p", str(pid)]
                tracers.append((await asyncio.create_subprocess_exec(*argv), out))
            await asyncio.sleep(1.0)  # attached to every thread (a stream holds one) before the window opens
        ticks = [_stat_ticks(pid) for pid in self.pids]
        database = pg_counters(self.service.database_url) if self.sqlite is None else None
        started = time.monotonic()
        await asyncio.sleep(seconds)
        elapsed = time.monotonic() - started
        tick = os.sysconf("SC_CLK_TCK")
        result: dict[str, Any] = {
            "seconds": elapsed,
            "web_cpu_percent": [
                100.0 * (_stat_ticks(pid) - before) / tick / elapsed
                for pid, before in zip(self.pids, ticks, strict=True)
            ],
            "web_threads": [threads(pid) for pid in self.pids],
        }
        if database is not None:
            after = pg_counters(self.service.database_url)
            result["postgres"] = {name: after[name] - database[name] for name in PG_COUNTERS}
        syscalls: dict[str, int] = {}
        for tracer, out in tracers:
            tracer.send_signal(signal.SIGINT)
            await asyncio.wait_for(tracer.wait(), 60)
            for name, calls in strace_counts(out.read_text()).items():
                syscalls[name] = syscalls.get(name, 0) + calls
        if tracers:
            result["sqlite_syscalls"] = syscalls
        return result

    def memory(self) -> list[dict[str, int]]:
        return [memory_kib(pid) for pid in self.pids]

    def trigger(self, line: str) -> dict[str, float]:
        """Write `line` to every run's FIFO, one after the other; when each write returned."""
        written = {}
        for run in self.runs:
            fifo = os.open(self.service.data_dir / "runs" / run / CROWD_TRIGGER, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fifo, f"{line}\n".encode())
            finally:
                os.close(fifo)
            written[run] = time.time()
        return written

    def events(self, run: str) -> list[dict[str, Any]]:
        status, body = self.service.request("GET", f"/v1/jobs/{run}/events/history?after_seq=0", self.tokens[0])
        assert status == 200, body
        return body["events"]


@dataclass
class Options:
    connections: int = 1000  # in all, over every web process
    runs: int = 4
    rounds: int = 10
    idle_seconds: float = 30.0  # each window holds one lease renewal (every 30 s) with Redis
    inbox: int = 20
    # The connections' users, each with a share of them. Opening a connection locks its user's row
    # (the per-user cap): a thousand of one user's would queue on that lock, which is no fan-out cost.
    users: int = 20
    profiler: Profiler | None = None


def start_crowd(root: Path, setup: str, engine: Path, args: Options) -> Crowd:
    config, webs = SETUPS[setup]
    env = {
        "SKILLRUNNER_CODEX_BIN": str(engine),
        "SKILLRUNNER_SANDBOX": "off",  # the sandbox is no part of fan-out; the bench writes into the run's folder
        "SKILLRUNNER_USER_MAX_STREAMS": str(args.connections),
        # One user holds every run's turn at once (the default per-user cap is one slot fewer).
        "SKILLRUNNER_MAX_CONCURRENT_TURNS": str(max(4, args.runs)),
        "SKILLRUNNER_USER_MAX_RUNNING": str(args.runs),
    }
    service = bench_service(root / setup, config, env)
    crowd = Crowd(setup, service, [], [], None)
    try:
        service.start()
        assert service.web is not None
        crowd.webs.append((service.web, service.port))
        for index in range(1, webs):
            crowd.webs.append(start_web(service, index))
        crowd.tokens = staff_tokens(service, args.users)
        wait_ready(service, crowd.tokens[0])
        if not service.database_url.startswith("postgres"):
            crowd.sqlite = service.data_dir / "skillrunner.sqlite3"
        crowd.runs = start_runs(crowd, args.runs)
    except BaseException:
        stop_crowd(crowd)
        raise
    return crowd


def staff_tokens(service: ServiceProcesses, users: int) -> list[str]:
    """A token for each of `users` new staff users (one `manage.py shell`)."""
    created = service.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        "from accounts.services import issue_token\n"
        f"for index in range({users}):\n"
        "    print('token', issue_token(get_user_model().objects.create(username=f'crowd-{index}', is_staff=True))[1])\n",
    )
    return [line.split()[1] for line in created.splitlines() if line.startswith("token ")]  # past any log lines


def start_web(service: ServiceProcesses, index: int) -> tuple[subprocess.Popen, int]:
    """Another daphne on the service's database and channel layer, on a port of its own."""
    port = free_port()
    argv = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "skillrunner.asgi:application"]
    with open(service.data_dir / f"web-{index}.log", "ab") as log:
        process = subprocess.Popen(
            argv, cwd=REPO, env=service.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    service.wait_until(lambda: _answers(port), 60, f"web process {index} to answer")
    return process, port


def _answers(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/system/ping", timeout=2) as response:
            return response.status == 204
    except OSError:
        return False


def start_runs(crowd: Crowd, runs: int) -> dict[str, int]:
    """`runs` runs whose turns wait on their FIFOs; each with the seq of its last event so far."""
    started = []
    for _ in range(runs):
        body = {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": f"{CROWD_MARK} {uuid.uuid4().hex}"}}
        status, created = crowd.service.request("POST", "/v1/jobs", crowd.tokens[0], body)
        assert status == 200, created
        started.append(created["request_id"])
    last = {}
    for run in started:
        fifo = crowd.service.data_dir / "runs" / run / CROWD_TRIGGER
        crowd.service.wait_until(fifo.exists, 60, f"the turn of {run} to wait on its FIFO")
        crowd.service.wait_for_status(crowd.tokens[0], run, {"running"})
        time.sleep(0.5)  # the turn's first events are written meanwhile
        last[run] = crowd.events(run)[-1]["seq"]
    return last


def stop_crowd(crowd: Crowd) -> None:
    for process, _ in crowd.webs[1:]:
        crowd.service.kill(process, signal.SIGTERM)
    crowd.service.stop()


# --- the measurement ----------------------------------------------------------------------------


async def fan_out(crowd: Crowd, connections: list[Connection], rounds: int) -> dict[str, Any]:
    """`rounds` events on every run at once; each run connection's receipt of each."""
    listening = [connection for connection in connections if connection.run is not None]
    seen: list[tuple[Connection, int, float]] = []  # (connection, round, arrival)
    written: dict[tuple[str, int], float] = {}
    missing = 0
    missed: dict[str, int] = {}  # by kind of connection
    for number in range(1, rounds + 1):
        marker = f'crowd {number}"'.encode()
        starts = {id(connection): len(connection.body) for connection in listening}
        for run, at in crowd.trigger(str(number)).items():
            written[(run, number)] = at
        waiting = list(listening)
        deadline = time.monotonic() + ROUND_TIMEOUT
        while waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            still = []
            for connection in waiting:
                arrival = connection.receipt(marker, starts[id(connection)])
                if arrival is None:
                    still.append(connection)
                else:
                    seen.append((connection, number, arrival))
            waiting = still
        missing += len(waiting)
        for connection in waiting:
            missed[connection.kind] = missed.get(connection.kind, 0) + 1
        await asyncio.sleep(ROUND_GAP_SECONDS)
    created = {}
    for run in crowd.runs:
        for event in crowd.events(run):
            command = event["payload"].get("command", "") if event["kind"] == "activity" else ""
            if command.startswith("crowd "):
                created[(run, int(command.split()[1]))] = datetime.fromisoformat(event["ts"]).timestamp()
    from_commit = [arrival - created[(c.run, number)] for c, number, arrival in seen if c.run is not None]
    from_write = [arrival - written[(c.run, number)] for c, number, arrival in seen if c.run is not None]
    kinds = sorted({c.kind for c, _, _ in seen})
    return {
        "rounds": rounds,
        "receivers": len(listening),
        "by_round": [
            summary([a - created[(c.run, n)] for c, n, a in seen if n == number and c.run is not None])
            for number in range(1, rounds + 1)
        ],
        "by_kind": {
            kind: summary([a - created[(c.run, n)] for c, n, a in seen if c.kind == kind and c.run is not None])
            for kind in kinds
        },
        "missing": missing,
        "missed_by_kind": missed,
        "from_created_at": summary(from_commit),
        "from_fifo_write": summary(from_write),
        "write_to_created_at": summary([created[key] - at for key, at in written.items() if key in created]),
    }


def summary(seconds: list[float]) -> dict[str, float | int]:
    """n, p50, p99 (nearest rank) and max, in ms."""
    ms = sorted(value * 1000 for value in seconds)
    if not ms:
        return {"n": 0}

    def rank(share: float) -> float:
        return ms[max(0, math.ceil(share * len(ms)) - 1)]

    return {"n": len(ms), "p50_ms": rank(0.5), "p99_ms": rank(0.99), "max_ms": ms[-1]}


def per_connection_kib(before: list[dict[str, int]], after: list[dict[str, int]], added: list[int]) -> dict[str, float]:
    """Memory the web processes gained per connection added, over all of them."""
    count = sum(added)
    return {
        key: sum(a[key] - b[key] for a, b in zip(after, before, strict=True)) / count for key in ("rss_kib", "pss_kib")
    }


async def measure_setup(crowd: Crowd, args: Options) -> dict[str, Any]:
    plan = Plan([port for _, port in crowd.webs], crowd.tokens, crowd.runs, args.connections, args.inbox)
    result: dict[str, Any] = {"setup": crowd.setup, "webs": len(crowd.webs), "runs": len(crowd.runs)}
    # Warm-up: one connection of each kind on each web, then none, so the code each kind runs is
    # loaded before the memory readings.
    warm = [
        plan.connection(kind, next(iter(crowd.runs)), port, crowd.tokens[0])
        for kind in ("socket", "inbox", "stream", "upstream")
        for port in plan.ports
    ]
    await open_all(warm)
    for connection in warm:
        connection.close()
    await asyncio.sleep(SETTLE_SECONDS)
    memory = {"none": crowd.memory()}

    baseline = plan.baseline()
    await open_all(baseline)
    await asyncio.sleep(SETTLE_SECONDS)
    memory["one"] = crowd.memory()
    result["idle_one"] = await crowd.idle(args.idle_seconds)
    print(f"[{crowd.setup}] idle, {len(baseline)} connection(s): {json.dumps(result['idle_one'])}", flush=True)

    rest = plan.rest()
    connections = baseline + rest
    result["open_seconds"] = await open_all(rest)
    kinds: dict[str, int] = {}
    for connection in connections:
        kinds[connection.kind] = kinds.get(connection.kind, 0) + 1
    result["connections"] = {"total": len(connections), **kinds}
    print(f"[{crowd.setup}] {len(connections)} open in {result['open_seconds']:.1f}s: {kinds}", flush=True)
    await asyncio.sleep(SETTLE_SECONDS)
    memory["all"] = crowd.memory()
    result["idle_all"] = await crowd.idle(args.idle_seconds)
    print(f"[{crowd.setup}] idle, {len(connections)} connections: {json.dumps(result['idle_all'])}", flush=True)
    per_web = [sum(1 for c in rest if c.port == port) for port in plan.ports]
    result["memory"] = memory
    result["kib_per_connection"] = per_connection_kib(memory["one"], memory["all"], per_web)

    with args.profiler.phase(crowd, "fan-out") if args.profiler else contextlib.nullcontext():
        result["fan_out"] = await fan_out(crowd, connections, args.rounds)
    print(f"[{crowd.setup}] fan-out: {json.dumps(result['fan_out'])}", flush=True)
    closed_early = [c.path for c in connections if c.closed]
    result["closed_early"] = len(closed_early)
    for connection in connections:
        connection.close()
    crowd.trigger("end")
    return result


def run_setup(root: Path, setup: str, engine: Path, args: Options) -> dict[str, Any]:
    loadavg_before = loadavg()
    crowd = start_crowd(root, setup, engine, args)
    try:
        result = asyncio.run(measure_setup(crowd, args))
    finally:
        stop_crowd(crowd)
    result["loadavg_before"], result["loadavg_after"] = loadavg_before, loadavg()
    return result


def raise_open_files_limit() -> None:
    """A thousand connections need more descriptors than a default soft limit of 1,024 (the
    service's processes inherit the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def measure(root: Path, setups: list[str], args: Options) -> dict[str, Any]:
    """Each setup in turn; what `make bench` calls."""
    raise_open_files_limit()
    engine = write_engine(root / "crowd-engine")
    return {setup: run_setup(root, setup, engine, args) for setup in setups}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.crowd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated: {', '.join(SETUPS)}")
    defaults = Options()
    parser.add_argument("--connections", type=int, default=defaults.connections, help="in all, over every web process")
    parser.add_argument("--runs", type=int, default=defaults.runs, help="runs the connections follow")
    parser.add_argument(
        "--rounds", type=int, default=defaults.rounds, help="events made on every run, a round a second"
    )
    parser.add_argument("--idle-seconds", type=float, default=defaults.idle_seconds, help="each idle window")
    parser.add_argument("--inbox", type=int, default=defaults.inbox, help="inbox sockets among the websockets")
    parser.add_argument("--users", type=int, default=defaults.users, help="staff users sharing the connections")
    parser.add_argument("--profile", type=Path, help="record py-spy profiles of the fan-out into this directory")
    parser.add_argument("--output", type=Path, default=REPO / "test-output" / "bench" / "crowd.json")
    parser.add_argument("--keep", action="store_true", help="keep the data directories (service logs)")
    parser.add_argument("--report", type=Path, help="print the table of a JSON this wrote earlier, and stop")
    args = parser.parse_args(argv)
    if args.report:
        print(report.crowd_table(json.loads(args.report.read_text())))
        return 0
    setups = [name.strip() for name in args.setups.split(",") if name.strip()]
    if unknown := [name for name in setups if name not in SETUPS]:
        parser.error(f"unknown setup(s): {', '.join(unknown)}")
    assert all(SETUPS[name][0] in CONFIGS for name in setups)
    root = Path(tempfile.mkdtemp(prefix="skillrunner-crowd-"))
    failed = True
    try:
        profiler = Profiler(args.profile) if args.profile else None
        options = Options(args.connections, args.runs, args.rounds, args.idle_seconds, args.inbox, args.users, profiler)
        results = measure(root, setups, options)
        failed = False
    finally:
        if args.keep or failed:
            print(f"data (and the service logs) kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(report.crowd_table(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1))
    print(f"raw figures: {args.output}")
    if profiler:
        print(profiler.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
