"""The service run for real in subprocesses: daphne and `manage.py worker`s on one database.

For tests that must cross process boundaries: browser tests, killing workers mid-turn, restart
recovery, several workers sharing one database. Every process gets its own process group and is
killed at `stop()`; waits are bounded.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import ephemeral_port_reserve

from tests.support.polling import poll
from tests.support.processes import ProcessTree, end_together, kill_trees

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def free_port() -> int:
    """A loopback port for a server a test starts. Reserved, not merely free when asked: a port
    the kernel hands out and nobody holds could be handed out again, to another test's server
    starting at the same moment, before ours binds it. A reserved port stays out of the kernel's
    own picks for a minute, while servers binding it with SO_REUSEADDR (daphne, Redis, PostgreSQL,
    asyncio's) may."""
    return ephemeral_port_reserve.reserve("127.0.0.1")


# Variables of the test run that a service's own processes keep (besides its own settings).
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "DATABASE_URL", "REDIS_URL")
SQLITE_NAME = "skillrunner.sqlite3"  # the embedded default's database, in the data dir (settings)


def fresh_postgres_url(base_url: str, template: str | None = None) -> str:
    """A new database on the server of `base_url`, empty or a copy of `template` (dropped by the
    caller's teardown)."""
    import psycopg

    name = f"skillrunner_live_{uuid.uuid4().hex[:10]}"
    copy_of = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy_of}')
    return base_url.rsplit("/", 1)[0] + "/" + name


# Users in every template, each with the token `manage.py create_api_token NAME` made there.
TEMPLATE_USERS = ("alice",)


class MigratedTemplates:
    """Databases migrated once per test process, that every service process and deployment starts
    from a copy of: the file copied on SQLite, `CREATE DATABASE … TEMPLATE` on PostgreSQL. Running
    the migrations took 2-4 s of CPU in each service's first `manage.py` process.

    A template is migrated as a service would migrate it, by `manage.py migrate` (and
    `createcachetable`, which makes the cache's table when the cache lives in the database: on
    PostgreSQL without Redis). It also holds the users most tests ask a token for (TEMPLATE_USERS,
    each with a token whose key `token_of` gives), so that no service starts a `manage.py` process
    for them. Each is removed when the test process ends; on PostgreSQL its name carries the pid,
    so scripts/test_servers.py drops those of killed runs."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, bool], str] = {}
        self._tokens: dict[str, dict[str, str]] = {}  # a template's users and their keys
        self._cleanups: list[Any] = []
        atexit.register(self.remove_all)

    def sqlite_file(self, redis: bool) -> Path:
        """A migrated SQLite database file, with nothing in its write-ahead log."""
        key = ("sqlite", redis)
        if key not in self._made:
            data_dir = Path(tempfile.mkdtemp(prefix="skillrunner-live-template-"))
            self._cleanups.append(lambda: shutil.rmtree(data_dir, ignore_errors=True))
            tokens = self._migrate({"SKILLRUNNER_DATA_DIR": str(data_dir)}, redis)
            database = data_dir / SQLITE_NAME
            with sqlite3.connect(database) as conn:  # WAL mode stays with the file; its log does not
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            self._made[key] = str(database)
            self._tokens[str(database)] = tokens
        return Path(self._made[key])

    def postgres_name(self, base_url: str, redis: bool) -> str:
        """The name of a migrated database on the server of `base_url`, to copy with TEMPLATE."""
        import psycopg

        parts = urllib.parse.urlsplit(base_url)
        key = (f"{parts.hostname}:{parts.port}", redis)
        if key not in self._made:
            name = f"test_skillrunner_{os.getpid()}_template_{len(self._made)}"
            with psycopg.connect(base_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                conn.execute(f'CREATE DATABASE "{name}"')
            self._cleanups.append(lambda: drop_postgres_database(base_url.rsplit("/", 1)[0] + "/" + name))
            data_dir = Path(tempfile.mkdtemp(prefix="skillrunner-live-template-"))
            try:
                self._tokens[name] = self._migrate(
                    {"SKILLRUNNER_DATA_DIR": str(data_dir), "DATABASE_URL": base_url.rsplit("/", 1)[0] + "/" + name},
                    redis,
                )
            finally:
                shutil.rmtree(data_dir, ignore_errors=True)
            self._made[key] = name
        return self._made[key]

    def _migrate(self, env: dict[str, str], redis: bool) -> dict[str, str]:
        full_env = {key: os.environ[key] for key in PASSED_ON if key in os.environ and key != "DATABASE_URL"}
        full_env.pop("REDIS_URL", None)  # the template's own processes need no Redis
        full_env.update(DJANGO_SETTINGS_MODULE="tests.settings", SECRET_KEY="live-test-secret-key", **env)
        commands = [["migrate", "--noinput"]] + ([] if redis else [["createcachetable"]])
        commands += [["create_api_token", name] for name in TEMPLATE_USERS]
        keys = {}
        for command in commands:
            done = subprocess.run(
                [PYTHON, "manage.py", *command], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=120
            )
            if done.returncode != 0:
                raise RuntimeError(f"manage.py {' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
            if command[0] == "create_api_token":
                keys[command[1]] = done.stdout.strip().splitlines()[-1]
        return keys

    def tokens_in(self, template: str) -> dict[str, str]:
        """The template users of `template` (a file or database name made here) and their keys."""
        return self._tokens[template]

    def remove_all(self) -> None:
        for cleanup in reversed(self._cleanups):
            try:
                cleanup()
            except Exception:  # the server may be gone already at exit
                pass
        self._cleanups.clear()
        self._made.clear()


TEMPLATES = MigratedTemplates()


def drop_postgres_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_until(predicate, timeout: float, what: str, interval: float | None = None):
    """Poll until `predicate()` is truthy and return its value; fail after `timeout` seconds.
    The pause between polls grows (tests.support.polling) unless `interval` fixes it."""
    value = poll(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return value


def wait_for_server(
    process: subprocess.Popen, answers: Callable[[], bool], timeout: float, what: str, log: Path
) -> None:
    """Wait until `answers()`; fail at once if the process ends first, and with the end of its
    log either way: a server that never answered says why."""
    if poll(lambda: process.poll() is not None or answers(), timeout) and process.poll() is None:
        return
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    if process.poll() is None:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; its log ends:\n{tail}")
    raise AssertionError(f"exited with {process.returncode} before {what}; its log ends:\n{tail}")


class ServiceProcesses:
    def __init__(self, data_dir: Path, env: dict[str, str] | None = None):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {key: value for key, value in os.environ.items() if key in PASSED_ON}
        self.env.update(
            DJANGO_SETTINGS_MODULE="tests.settings",
            SKILLRUNNER_TEST_LIVE_WORKER="1",
            SKILLRUNNER_DATA_DIR=str(self.data_dir),
            SECRET_KEY="live-test-secret-key",
            PYTHONUNBUFFERED="1",
            PYTHONFAULTHANDLER="1",  # a process sent SIGABRT writes every thread's stack to its log
            # A stop ends the turns at once, as before R-OP10, unless a test is about the drain:
            # stop() would otherwise wait for every turn still running.
            SKILLRUNNER_DRAIN_SECONDS="0",
        )
        self.env.update(env or {})
        # The database is there, migrated, from the start: a copy of this process's template.
        self.database_url = self.env.get("DATABASE_URL", "")
        redis = bool(self.env.get("REDIS_URL"))
        if self.database_url.startswith("postgres"):
            template = TEMPLATES.postgres_name(self.database_url, redis)
            self.database_url = self.env["DATABASE_URL"] = fresh_postgres_url(self.database_url, template)
        else:
            template = str(TEMPLATES.sqlite_file(redis))
            shutil.copyfile(template, self.data_dir / SQLITE_NAME)
        self._unused_tokens = dict(TEMPLATES.tokens_in(template))  # handed out once each by token()
        self.env["SKILLRUNNER_QUEUE_NAME"] = f"live-{uuid.uuid4().hex[:8]}"
        self.web: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.serves: list[subprocess.Popen] = []
        self.trees: list[ProcessTree] = []
        self._logs: list[Any] = []

    # --- processes ---------------------------------------------------------------------------

    def manage(self, *args: str, timeout: float = 120, stdin: str | None = None) -> str:
        """`stdin` is what the command reads, passwords too: in a session of its own, without a
        terminal, getpass reads them from stdin."""
        done = subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=stdin is not None,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def _log(self, name: str) -> IO[bytes]:
        log = open(self.data_dir / f"{name}.log", "ab")
        self._logs.append(log)
        return log

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(
            argv, cwd=REPO, env=self.env, stdout=self._log(name), stderr=subprocess.STDOUT, start_new_session=True
        )

    def _argv(self, kind: str) -> list[str]:
        """The command of a "serve" (`make run`), a "worker" or a "web" process."""
        if kind == "web":
            return [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "skillrunner.asgi:application"]
        return [PYTHON, "manage.py", kind, *(["--port", str(self.port)] if kind == "serve" else [])]

    def start_tree(self, kind: str) -> ProcessTree:
        """A "serve", "worker" or "web" process under a reaper of its own (its log: `kind`), so
        every process it ever starts can be counted; killed with all of them at `stop()`."""
        tree = ProcessTree(self._argv(kind), cwd=REPO, env=self.env, log=self._log(kind))
        self.trees.append(tree)
        return tree

    def start(self, workers: int = 1) -> ServiceProcesses:
        """Migrated already (TEMPLATES); the skills are installed by the worker's start-up
        recovery, which `start` waits for, or here when no worker starts."""
        if not workers:
            self.manage("load_skills")
        self.start_web()
        for _ in range(workers):
            self.start_worker()
        self.wait_web()
        if workers:
            self.wait_until(lambda: self._readiness().get("worker") == "ok", 60, "a worker to finish its recovery")
        return self

    def start_web(self) -> None:
        self.web = self._spawn("web", self._argv("web"))

    def wait_web(self, timeout: float = 30) -> None:
        assert self.web is not None, "no web process started"
        wait_for_server(
            self.web, lambda: self._ping() == 204, timeout, "the web server to answer", self.data_dir / "web.log"
        )

    def start_serve(self) -> subprocess.Popen:
        """`make run`'s command: web and worker under one parent, in a process group of their own."""
        serve = self._spawn("serve", self._argv("serve"))
        self.serves.append(serve)
        return serve

    def start_worker(self) -> subprocess.Popen:
        worker = self._spawn(f"worker-{len(self.workers)}", self._argv("worker"))
        self.workers.append(worker)
        return worker

    def kill(self, process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal a whole process group (a worker's cluster processes die with it)."""
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM to each main process (as a process manager would), then SIGKILL its group;
        whatever is left of a tree is killed. All at once: the waits do not add up."""
        kill_trees(self.trees)
        processes = [*self.serves, *self.workers, *([self.web] if self.web else [])]
        end_together(processes, signal.SIGTERM, to_group=False, grace=15)
        for process in processes:  # ended or not: what it started may be left
            self.kill(process, signal.SIGKILL)
        for log in self._logs:
            log.close()
        if self.database_url.startswith("postgres"):
            drop_postgres_database(self.database_url)

    def log(self, name: str) -> str:
        path = self.data_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_until_worker_serves(self, log: str) -> None:
        """Until the worker logging to `log` says it serves: before that its children may include
        short-lived ones besides its task process (the start-up recovery's child, the sandbox
        check's bwrap)."""
        started = re.compile(r"^worker \w+ started$", re.M)
        self.wait_until(lambda: started.search(self.log(log)), 30, "the worker to serve")

    # --- HTTP ------------------------------------------------------------------------------

    def token(self, username: str, staff: bool = False) -> str:
        """A new token of `username` (created if missing), as `manage.py create_api_token` makes."""
        if not staff and username in self._unused_tokens:
            return self._unused_tokens.pop(username)
        return self.manage("create_api_token", username, *(["--staff"] if staff else [])).strip().splitlines()[-1]

    def _ping(self) -> int | None:
        return self._status_of("/v1/system/ping", timeout=2)

    def readyz(self) -> int | None:
        return self._status_of("/v1/system/readyz", timeout=5)

    def _readiness(self) -> dict[str, str]:
        """The checks /readyz reports, or none while it does not answer with them."""
        try:
            with urllib.request.urlopen(self.url + "/v1/system/readyz", timeout=5) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
        except OSError:
            return {}
        return json.loads(raw).get("checks", {})

    def _status_of(self, path: str, timeout: float) -> int | None:
        """The HTTP status of GET `path` (no token), or None while nothing answers."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return None  # the web server is not listening yet

    def request(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Token {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def start_trip(self, token: str, engine: str = "codex") -> str:
        """POST an interactive trip-planner run (the skill that asks first); its request id."""
        status, body = self.request(
            "POST",
            "/v1/jobs",
            token,
            {
                "skill_id": "trip-planner",
                "engine": engine,
                "input": {},
                "runtime_options": {"execution_mode": "interactive"},
            },
        )
        assert status == 200, body
        return body["request_id"]

    wait_until = staticmethod(wait_until)

    def wait_for_status(self, token: str, request_id: str, statuses: set[str], timeout: float = 60) -> dict:
        def current():
            _, body = self.request("GET", f"/v1/jobs/{request_id}", token)
            return body if isinstance(body, dict) and body.get("status") in statuses else None

        return self.wait_until(current, timeout, f"run {request_id} to become one of {sorted(statuses)}")


def with_fake_codex(tmp_path: Path, env: dict[str, str]) -> ServiceProcesses:
    """A service in `tmp_path / "data"` whose codex is a scripted fake (`service.fake`), kept
    outside the data dir, which the sandbox never shows an engine."""
    from tests.support.fake_codex import FakeCodex

    (tmp_path / "engine").mkdir()
    fake = FakeCodex(tmp_path / "engine", tmp_path / "data")
    service = ServiceProcesses(tmp_path / "data", env={"SKILLRUNNER_CODEX_BIN": str(fake.binary), **env})
    service.fake = fake
    return service
