"""The scale-out configuration (R-OP2) run for real: several daphne web processes and several
`manage.py worker` clusters on one fresh PostgreSQL database and a Redis server of our own.

- PostgreSQL: a new database, a copy of a migrated template (tests/support/service_processes.py), on
  the server of DATABASE_URL when that is PostgreSQL, else on that of SCALEOUT_DATABASE_URL
  (`make test` sets it, to a private server when none is given), else on
  postgres://postgres@127.0.0.1:5432 (dropped at the end). The service's URL carries a password
  (ignored by trust auth) so tests can check that it never shows up anywhere.
- Redis: our own `redis-server` on a free loopback port with a password, never the machine's
  shared instance, so tests may kill and restart it.
- The engine is tests/scaleout/probe_engine.py, in the agent sandbox (the default, R-SB1); the
  service runs the production settings (`skillrunner.settings`), not the test settings.

Every process runs in its own process group and is killed at `stop()`; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.scaleout.probe_engine import ProbeEngine
from tests.support.processes import end_together, processes_in
from tests.support.service_processes import (
    TEMPLATES,
    drop_postgres_database,
    free_port,
    fresh_postgres_url,
    wait_for_server,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"
TERMINAL = {"succeeded", "failed", "canceled"}


def _kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 15) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


def postgres_base_url() -> str:
    """The PostgreSQL server to create databases on, with a (trust-ignored) password if it has none."""
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith("postgres"):
        base = os.environ.get("SCALEOUT_DATABASE_URL") or DEFAULT_POSTGRES
    parts = urllib.parse.urlsplit(base)
    if parts.password is None and parts.hostname in ("127.0.0.1", "localhost"):
        user = parts.username or "postgres"
        netloc = f"{user}:pg-secret-{secrets.token_hex(6)}@{parts.hostname}:{parts.port or 5432}"
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return base


def with_port(url: str, port: int) -> str:
    parts = urllib.parse.urlsplit(url)
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urllib.parse.urlunsplit(
        (parts.scheme, f"{userinfo}{parts.hostname}:{port}", parts.path, parts.query, parts.fragment)
    )


def _with_retries(action, attempts: int = 10, pause: float = 1.0):
    """PostgreSQL is shared with other test runs on this machine: ride out a moment when all
    its connection slots are taken instead of failing the test for someone else's load."""
    import psycopg

    for attempt in range(attempts):
        try:
            return action()
        except psycopg.OperationalError as exc:
            if "too many clients" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(pause)


class RedisServer:
    """A private redis-server on a free loopback port; kill() and start() keep the port."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password = f"redis-secret-{secrets.token_hex(6)}"
        self.url = f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        log = open(self.root / "redis.log", "ab")
        argv = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--requirepass",
            self.password,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.root),
            "--daemonize",
            "no",
        ]
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_until(self.ping, 10, "redis-server to answer")
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
                data = b""
                while b"PONG" not in data and len(data) < 200:
                    chunk = sock.recv(200)
                    if not chunk:
                        break
                    data += chunk
                return b"+PONG" in data
        except OSError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            _kill_group(self.process)
        self.process = None

    stop = kill


class TcpProxy:
    """A loopback TCP relay to `target_port` that can be cut: while cut, every relayed connection
    is closed and new ones are dropped at once, as if the server had gone away."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.stopped = False
        self.lock = threading.Lock()
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self.thread.start()

    def _accept_loop(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            if not self.open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self.stopped and self.open:
                readable, _, _ = select.select([a, b], [], [], 0.2)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except OSError:
            pass
        finally:
            for sock in (a, b):
                try:
                    sock.close()
                except OSError:
                    pass

    def cut(self) -> None:
        self.open = False
        with self.lock:
            doomed, self.connections = self.connections, []
        for sock in doomed:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.stopped = True
        self.cut()
        self.thread.join(timeout=5)
        self.listener.close()


class Deployment:
    """`webs` daphne processes and `workers` worker clusters sharing one database, one Redis and
    one data directory (as machines would share a volume)."""

    def __init__(
        self,
        root: Path,
        *,
        webs: int = 1,
        workers: int = 1,
        max_turns: int = 2,
        db_proxy: bool = False,
        env: dict[str, str] | None = None,
    ):
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.logs_dir = self.root / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.engine = ProbeEngine(self.root / "engine", self.data_dir)
        self.redis = RedisServer(self.root / "redis").start()
        try:
            base_url = postgres_base_url()
            # Migrated from the start: a copy of this test process's template (there is Redis).
            template = _with_retries(lambda: TEMPLATES.postgres_name(base_url, redis=True))
            self.admin_database_url = _with_retries(lambda: fresh_postgres_url(base_url, template))
        except BaseException:
            self.redis.stop()
            raise
        self.proxy = TcpProxy(urllib.parse.urlsplit(self.admin_database_url).port or 5432) if db_proxy else None
        self.database_url = (
            with_port(self.admin_database_url, self.proxy.port) if self.proxy else self.admin_database_url
        )
        self.secrets: dict[str, str] = {
            "SECRET_KEY": f"django-secret-{secrets.token_hex(16)}",
            "SKILLRUNNER_CODEX_API_KEY": f"codex-key-{secrets.token_hex(12)}",
            "SKILLRUNNER_GEMINI_API_KEY": f"gemini-key-{secrets.token_hex(12)}",
            "SKILLRUNNER_CLAUDE_API_KEY": f"claude-key-{secrets.token_hex(12)}",
            "SKILLRUNNER_IFLOW_API_KEY": f"iflow-key-{secrets.token_hex(12)}",
            "database password": urllib.parse.urlsplit(self.database_url).password or "",
            "redis password": self.redis.password,
        }
        self.env = {key: os.environ[key] for key in ("PATH", "LANG", "LC_ALL", "TZ", "HOME") if key in os.environ}
        self.env.update(
            DJANGO_SETTINGS_MODULE="skillrunner.settings",
            PYTHONUNBUFFERED="1",
            SKILLRUNNER_DATA_DIR=str(self.data_dir),
            SECRET_KEY=self.secrets["SECRET_KEY"],
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis.url,
            SKILLRUNNER_QUEUE_NAME=f"scaleout-{uuid.uuid4().hex[:8]}",
            SKILLRUNNER_MAX_CONCURRENT_TURNS=str(max_turns),
            SKILLRUNNER_HEARTBEAT_SECONDS="1",
            SKILLRUNNER_KILL_GRACE_SECONDS="1",
            SKILLRUNNER_DRAIN_SECONDS="0",  # as before R-OP10, unless a test is about the drain
            SKILLRUNNER_CODEX_BIN=str(self.engine.binary),
            SKILLRUNNER_CODEX_API_KEY=self.secrets["SKILLRUNNER_CODEX_API_KEY"],
            SKILLRUNNER_GEMINI_API_KEY=self.secrets["SKILLRUNNER_GEMINI_API_KEY"],
            SKILLRUNNER_CLAUDE_API_KEY=self.secrets["SKILLRUNNER_CLAUDE_API_KEY"],
            SKILLRUNNER_IFLOW_API_KEY=self.secrets["SKILLRUNNER_IFLOW_API_KEY"],
            LOG_LEVEL="INFO",
        )
        self.env.update(env or {})
        self.web_ports = [free_port() for _ in range(webs)]
        self.webs: list[subprocess.Popen | None] = [None] * webs
        self.workers: list[subprocess.Popen] = []
        self.n_workers = workers
        self.tokens: dict[str, str] = {}

    # --- lifecycle ---------------------------------------------------------------------------

    def manage(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        (self.logs_dir / "manage.log").open("a").write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self, users: tuple[str, ...] = ("alice", "bob"), staff: tuple[str, ...] = ("ops",)) -> Deployment:
        self.manage("load_skills")  # migrated already (TEMPLATES)
        self.create_tokens(users, staff)
        for index in range(len(self.webs)):
            self.start_web(index)
        for _ in range(self.n_workers):
            self.start_worker()
        for index in range(len(self.webs)):
            self.wait_web(index)
        for index in range(len(self.workers)):
            self.wait_worker(index)
        return self

    def create_tokens(self, users: tuple[str, ...], staff: tuple[str, ...]) -> None:
        script = (
            "import json\n"
            "from django.contrib.auth import get_user_model\n"
            "from accounts.models import ApiToken\n"
            "User = get_user_model()\n"
            "out = {}\n"
            f"for name, is_staff in {[(u, False) for u in users] + [(s, True) for s in staff]!r}:\n"
            "    user, _ = User.objects.get_or_create(username=name)  # a template user (TEMPLATE_USERS) exists\n"
            "    user.set_password(name + '-password-123')\n"
            "    user.is_staff = is_staff\n"
            "    user.save()\n"
            "    out[name] = ApiToken.issue(user)[1]\n"
            "print(json.dumps(out))\n"
        )
        created = json.loads(self.manage("shell", "-c", script).strip().splitlines()[-1])
        self.tokens.update(created)
        for name, key in created.items():
            self.secrets[f"token of {name}"] = key

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.logs_dir / f"{name}.log", "ab")
        try:
            return subprocess.Popen(
                argv, cwd=REPO, env=env or self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()

    def start_web(self, index: int) -> None:
        argv = [
            PYTHON,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(self.web_ports[index]),
            "skillrunner.asgi:application",
        ]
        self.webs[index] = self._spawn(f"web-{index}", argv)

    def wait_web(self, index: int, timeout: float = 30) -> None:
        web = self.webs[index]
        assert web is not None, f"web {index} was never started"
        wait_for_server(
            web, lambda: self.ping(index) == 204, timeout, f"web {index} to answer", self.logs_dir / f"web-{index}.log"
        )

    def start_worker(self) -> int:
        index = len(self.workers)
        # Its own executable tells the probe engine which cluster started it (probe_engine.py).
        env = {**self.env, "SKILLRUNNER_CODEX_BIN": str(self.engine.binary_of(index))}
        self.workers.append(self._spawn(f"worker-{index}", [PYTHON, "manage.py", "worker"], env))
        return index

    def wait_worker(self, index: int, timeout: float = 30) -> None:
        wait_until(
            lambda: "started" in self.log(f"worker-{index}") or self.workers[index].poll() is not None,
            timeout,
            f"worker {index} to start",
        )
        assert self.workers[index].poll() is None, f"worker {index} exited:\n{self.log(f'worker-{index}')[-3000:]}"

    def kill_web(self, index: int, sig: int = signal.SIGKILL) -> None:
        process = self.webs[index]
        if process is not None:
            _kill_group(process, sig)

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        _kill_group(self.workers[index], sig)

    @staticmethod
    def terminate(process: subprocess.Popen, timeout: float) -> int:
        """SIGTERM to the main process only, as systemd's KillMode=mixed stops a unit; its exit
        status, or a failure (after SIGKILL to its group) if it outlives `timeout`."""
        process.terminate()
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise AssertionError(f"process {process.pid} still ran {timeout} s after SIGTERM") from None

    def worker_index_of_group(self, group: int | None) -> int | None:
        for index, process in enumerate(self.workers):
            if process.pid == group:
                return index
        return None

    def stop(self) -> list[int]:
        """Stop everything; returns the engine processes still alive before the final sweep."""
        end_together([*self.workers, *[w for w in self.webs if w is not None]], signal.SIGTERM, to_group=True, grace=15)
        leftover = self.engine_processes()
        for pid in leftover:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.redis.stop()
        if self.proxy is not None:
            self.proxy.close()
        try:
            drop_postgres_database(self.admin_database_url)
        except Exception:  # the database may already be gone; never mask the test's own outcome
            pass
        return leftover

    # --- observation -----------------------------------------------------------------------

    def log(self, name: str) -> str:
        path = self.logs_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def all_logs(self) -> dict[str, str]:
        return {p.stem: p.read_text(errors="replace") for p in sorted(self.logs_dir.glob("*.log"))}

    def engine_processes(self) -> list[int]:
        """Live engine processes of every run (host pids, the sandboxes' bwrap included), seen from outside."""
        return processes_in(self.data_dir / "runs")

    def engine_processes_of(self, request_id: str) -> list[int]:
        return processes_in(self.data_dir / "runs" / request_id)

    def db(self, sql: str, params: tuple = ()) -> list[tuple]:
        """A direct read on the service's database (bypassing any proxy)."""
        import psycopg

        def read():
            with psycopg.connect(self.admin_database_url, autocommit=True, connect_timeout=5) as conn:
                return conn.execute(sql, params).fetchall()

        return _with_retries(read)

    # --- HTTP ------------------------------------------------------------------------------

    def url(self, web: int = 0) -> str:
        return f"http://127.0.0.1:{self.web_ports[web]}"

    def ping(self, web: int = 0) -> int | None:
        try:
            with urllib.request.urlopen(self.url(web) + "/v1/system/ping", timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return None

    def request(
        self,
        method: str,
        path: str,
        user: str | None = None,
        body: Any = None,
        *,
        web: int = 0,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url(web) + path, data=data, method=method)
        if user is not None:
            req.add_header("Authorization", f"Token {self.tokens[user]}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def create(
        self, user: str, skill_id: str, *, web: int = 0, input: dict | None = None, mode: str = "auto", **options: Any
    ) -> str:
        body = {
            "skill_id": skill_id,
            "engine": "codex",
            "input": input or {},
            "runtime_options": {"execution_mode": mode, **options},
        }
        status, answer = self.request("POST", "/v1/jobs", user, body, web=web)
        assert status == 200, (status, answer)
        return answer["request_id"]

    def status(self, user: str, request_id: str, web: int = 0) -> dict:
        code, body = self.request("GET", f"/v1/jobs/{request_id}", user, web=web)
        assert code == 200, (code, body)
        return body

    def wait_status(self, user: str, request_id: str, statuses: set[str], timeout: float = 60, web: int = 0) -> dict:
        def reached():
            code, body = self.request("GET", f"/v1/jobs/{request_id}", user, web=web)
            return body if code == 200 and body.get("status") in statuses else None

        try:
            return wait_until(reached, timeout, f"run {request_id} to become one of {sorted(statuses)}", interval=0.25)
        except AssertionError:
            raise AssertionError(
                f"run {request_id} is {self.status(user, request_id, web)}\n{self.tail_logs()}"
            ) from None

    def runs(self) -> dict[str, dict]:
        """Every run of every user, as the staff API lists them."""
        code, body = self.request("GET", "/v1/jobs?page_size=200", "ops")
        assert code == 200, (code, body)
        return {r["request_id"]: r for r in body["results"]}

    def events(self, user: str, request_id: str, web: int = 0) -> list[dict]:
        events: list[dict] = []
        for _ in range(100):
            code, body = self.request(
                "GET", f"/v1/jobs/{request_id}/events/history?after_seq={len(events)}", user, web=web
            )
            assert code == 200, (code, body)
            if not body["events"]:
                return events
            events += body["events"]
        raise AssertionError("event history did not end")

    def tail_logs(self, chars: int = 2500) -> str:
        return "\n".join(
            f"--- {name} ---\n{text[-chars:]}" for name, text in self.all_logs().items() if name != "manage"
        )
