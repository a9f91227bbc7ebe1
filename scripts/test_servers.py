"""Runs a command with a PostgreSQL and a Redis server for the test suite (R-OP6).

    python scripts/test_servers.py COMMAND [ARG...]

SCALEOUT_DATABASE_URL / SCALEOUT_REDIS_URL are used when set and reachable. Otherwise this
starts private throwaway servers (a fresh `initdb` cluster in a temporary directory, run as an
unprivileged user, and `redis-server --save ''`, both on free loopback ports), exports their URLs
under those names to COMMAND, and stops them and removes their directories when COMMAND ends,
fails or is interrupted. Before and after, databases `test_skillrunner_<pid>[_gw<N>|_template_<N>]`
left by test processes that no longer run are dropped from the server used.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import psycopg
from ephemeral_port_reserve import reserve as reserve_port

from engines.process import pid_alive

# pytest-django adds _gw<N> under pytest-xdist; the number is the test process's pid (tests/settings.py).
# _template_<N>: the migrated databases service processes are copied from (tests/support/service_processes.py).
LEFTOVER_TEST_DATABASE = re.compile(r"test_skillrunner_(\d+)(?:_gw\d+|_template_\d+)?")
START_TIMEOUT = 60


def wait_for(check, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"test_servers: {what} did not come up within {START_TIMEOUT}s")
        time.sleep(0.2)


def postgres_answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def redis_answers(url: str) -> bool:
    """PING (after AUTH when the URL has a password) over a plain socket: no client library needed."""
    parts = urllib.parse.urlsplit(url)
    request = (f"AUTH {parts.password}\r\n" if parts.password else "") + "PING\r\n"
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=3) as sock:
            sock.sendall(request.encode())
            reply = b""
            while b"PONG" not in reply and b"-" not in reply and len(reply) < 200:
                chunk = sock.recv(200)
                if not chunk:
                    break
                reply += chunk
            return b"+PONG" in reply
    except OSError:
        return False


def postgres_bin(name: str) -> str:
    """Debian keeps the server programs out of PATH, under /usr/lib/postgresql/<major>/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise SystemExit(f"test_servers: {name} not found; install the postgresql package (make test does)")
    return found


class PrivateServers:
    """Throwaway servers started here; stop() ends them and removes everything they wrote."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="skillrunner-test-servers-"))
        self.processes: list[subprocess.Popen] = []

    def start_postgres(self) -> str:
        # initdb and postgres refuse to run as root: run them as the postgres user Debian's
        # package creates (or nobody), in a directory that user owns.
        user = None
        if os.geteuid() == 0:
            user = next((name for name in ("postgres", "nobody") if _user_exists(name)), None)
            os.chmod(self.root, 0o755)
        data, sockets = self.root / "postgres", self.root / "postgres-sockets"
        for folder in (data, sockets):
            folder.mkdir()
            if user:
                shutil.chown(folder, user)
        # cwd: a directory that user may enter (the checkout may be one it cannot).
        as_user = {"user": user, "cwd": self.root} if user else {}
        subprocess.run(
            [postgres_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            stdout=subprocess.DEVNULL,
            **as_user,
        )
        port = reserve_port("127.0.0.1")  # kept out of the kernel's picks until the server binds it
        settings = ["listen_addresses=127.0.0.1", f"unix_socket_directories={sockets}", "fsync=off"]
        settings += ["full_page_writes=off", "synchronous_commit=off"]
        argv = [postgres_bin("postgres"), "-D", str(data), "-p", str(port)]
        for setting in settings:
            argv += ["-c", setting]
        self._spawn(argv, "postgres.log", **as_user)
        url = f"postgres://postgres@127.0.0.1:{port}/postgres"
        wait_for(lambda: postgres_answers(url), "the private PostgreSQL")
        return url

    def start_redis(self) -> str:
        port = reserve_port("127.0.0.1")  # kept out of the kernel's picks until the server binds it
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.root), "--daemonize", "no"]
        self._spawn(argv, "redis.log")
        url = f"redis://127.0.0.1:{port}/0"
        wait_for(lambda: redis_answers(url), "the private Redis")
        return url

    def _spawn(self, argv: list[str], log_name: str, **kwargs) -> None:
        with open(self.root / log_name, "ab") as log:
            self.processes.append(
                subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
            )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()  # postgres: SIGTERM is a "smart" shutdown; fine with no clients left
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def drop_leftover_test_databases(url: str) -> None:
    """pytest-django names each test database after its process; one whose process is gone
    (a killed run) is dropped. Databases of test runs still going are left alone."""
    with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
        names = [row[0] for row in conn.execute("SELECT datname FROM pg_database")]
        for name in names:
            match = LEFTOVER_TEST_DATABASE.fullmatch(name)
            if match and not pid_alive(int(match.group(1))):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                print(f"test_servers: dropped leftover database {name}", file=sys.stderr)


def run_to_the_end(command: list[str], env: dict[str, str]) -> int:
    """Run COMMAND; if we are stopped first, pass the stop on and give it time to clean up."""
    process = subprocess.Popen(command, env=env)
    try:
        return process.wait()
    except BaseException:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise


def main(command: list[str]) -> int:
    if not command:
        raise SystemExit(__doc__)
    # SIGTERM (CI stopping us, a killed make) ends like Ctrl-C: through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    private = PrivateServers()
    try:
        # Only servers given by name are used: whatever else listens on this machine's usual ports
        # belongs to someone else (R-OP6).
        database_url = os.environ.get("SCALEOUT_DATABASE_URL", "")
        if not database_url or not postgres_answers(database_url):
            print(f"test_servers: PostgreSQL {_absent(database_url)}; starting a private one", file=sys.stderr)
            database_url = private.start_postgres()
        redis_url = os.environ.get("SCALEOUT_REDIS_URL", "")
        if not redis_url or not redis_answers(redis_url):
            print(f"test_servers: Redis {_absent(redis_url)}; starting a private one", file=sys.stderr)
            redis_url = private.start_redis()
        drop_leftover_test_databases(database_url)
        env = {**os.environ, "SCALEOUT_DATABASE_URL": database_url, "SCALEOUT_REDIS_URL": redis_url}
        print(f"test_servers: PostgreSQL {_safe(database_url)}, Redis {_safe(redis_url)}", file=sys.stderr)
        returncode = run_to_the_end(command, env)
        drop_leftover_test_databases(database_url)
        return returncode
    finally:
        private.stop()


def _absent(url: str) -> str:
    return f"at {_safe(url)} does not answer" if url else "not given"


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urllib.parse.urlsplit(url)
    host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
