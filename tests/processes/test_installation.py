"""Settings without side effects, and the explicit startup step (issue 9; R-FS3): importing the
settings writes nothing and reads no command line; `prepare_installation` creates the data
directory privately and the secret key atomically with mode 0600, once."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from processes import startup
from tests.support.service_processes import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_importing_settings_creates_nothing(tmp_path):
    data_dir = tmp_path / "fresh-install"
    env = {key: os.environ[key] for key in ("PATH", "LANG") if key in os.environ}
    env.update(SKILLRUNNER_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="skillrunner.settings")
    code = "import django; django.setup(); from skillrunner import settings; print(repr(settings.SECRET_KEY))"
    done = subprocess.run(
        [sys.executable, "-c", code, "worker"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "''"  # no key yet: nothing generated on import (Django refuses to use it)
    assert not data_dir.exists()


def test_prepare_installation_makes_a_private_dir_and_one_key(tmp_path, settings):
    settings.DATA_DIR = tmp_path / "fresh-install"
    settings.STATIC_ROOT = settings.DATA_DIR / "staticfiles"
    settings.SECRET_KEY = ""

    startup.prepare_installation()

    key_file = settings.DATA_DIR / startup.SECRET_KEY_FILE
    assert _mode(settings.DATA_DIR) == 0o700 and _mode(key_file) == 0o600
    assert settings.SECRET_KEY == key_file.read_text().strip() and len(settings.SECRET_KEY) >= 50
    first = settings.SECRET_KEY
    settings.SECRET_KEY = ""
    startup.prepare_installation()
    assert settings.SECRET_KEY == first  # idempotent: the key is made once
    assert [p.name for p in settings.DATA_DIR.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_concurrent_key_creation_agrees_on_one_key(tmp_path):
    keys = set()
    with ThreadPoolExecutor(8) as pool:
        keys.update(pool.map(lambda _: startup._create_secret_key(tmp_path / "secret_key"), range(8)))
    assert len(keys) == 1 and keys == {(tmp_path / "secret_key").read_text().strip()}


def test_manage_py_creates_everything_private_R_FS3(tmp_path):
    """The database, data dir and what a command creates later are the service user's only."""
    data_dir = tmp_path / "fresh-install"
    env = {key: os.environ[key] for key in ("PATH", "LANG") if key in os.environ}
    env.update(SKILLRUNNER_DATA_DIR=str(data_dir), SECRET_KEY="x" * 50)
    code = "import os; from django.conf import settings; d = settings.DATA_DIR / 'runs' / 'r1'; d.mkdir(parents=True); (d / 'f').write_text('x')"
    prepare = "from processes.startup import prepare_installation; prepare_installation()"
    for command in (["shell", "-c", prepare], ["migrate", "--no-input"], ["shell", "-c", code]):
        done = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    assert _mode(data_dir / "skillrunner.sqlite3") == 0o600
    assert _mode(data_dir) == 0o700
    assert _mode(data_dir / "runs") == 0o700 and _mode(data_dir / "runs" / "r1" / "f") == 0o600


# --- R-OP12: every entry point prepares the installation or refuses to start in one line -------


def _fresh_env(data_dir: Path) -> dict[str, str]:
    """The production settings on `data_dir`, with no SECRET_KEY, on the embedded default."""
    env = {key: os.environ[key] for key in ("PATH", "LANG", "HOME") if key in os.environ}
    env.update(SKILLRUNNER_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="skillrunner.settings")
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def _get(url: str, cookie: str = "") -> int | None:
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        with opener.open(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None  # not listening yet


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect to the login page is the answer


LOGGED_IN_SESSION = (
    "from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY\n"
    "from django.contrib.sessions.backends.db import SessionStore\n"
    "user = get_user_model().objects.create_user('alice', password='alice-password-123')\n"
    "session = SessionStore()\n"
    "session.update({SESSION_KEY: str(user.pk), HASH_SESSION_KEY: user.get_session_auth_hash(),\n"
    "  BACKEND_SESSION_KEY: 'django.contrib.auth.backends.ModelBackend'})\n"
    "session.create()\n"
    "print(session.session_key)\n"
)


def test_a_web_started_alone_on_a_fresh_data_dir_makes_the_key_the_others_use_R_OP12(tmp_path):
    """daphne on skillrunner.asgi before any `serve` or `worker` made the key, without SECRET_KEY:
    the web makes it (private, R-FS3) and serves; `manage.py` commands and the worker use that
    key: a session signed with it by a command (its auth hash is an HMAC of the key) logs the
    person in on the web."""
    data_dir = tmp_path / "fresh-install"
    env = _fresh_env(data_dir)
    port = free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "skillrunner.asgi:application"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    worker = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _get(url + "/v1/system/ping") == 204, 60, "the web to answer")
        key_file = data_dir / startup.SECRET_KEY_FILE
        key = key_file.read_text()
        assert _mode(key_file) == 0o600 and _mode(data_dir) == 0o700

        migrated = _manage(env, "migrate", "--no-input")
        assert migrated.returncode == 0, migrated.stderr
        made = _manage(env, "shell", "-c", LOGGED_IN_SESSION)
        assert made.returncode == 0, made.stderr
        session = made.stdout.strip().splitlines()[-1]
        assert _get(url + "/settings/", f"sessionid={session}") == 200  # the same key: logged in
        assert _get(url + "/settings/") == 302  # (and without the session, the login page)

        worker = subprocess.Popen(
            [sys.executable, "manage.py", "worker"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(lambda: _get(url + "/v1/system/readyz") == 200, 60, "the worker to be ready")
        assert key_file.read_text() == key  # one key for every process
    finally:
        for process in (web, worker):
            if process is not None:
                _end(process)
    assert list(data_dir.glob(f".{startup.SECRET_KEY_FILE}*")) == []  # no staging file left


def _end(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def test_an_entry_point_that_cannot_make_the_key_refuses_in_one_line_R_OP12(tmp_path):
    """A data dir that cannot be made (here: a file stands where its parent should be): the web
    and `manage.py` exit non-zero at once, saying why in one line, no traceback."""
    (tmp_path / "not-a-folder").write_text("")
    env = _fresh_env(tmp_path / "not-a-folder" / "data")
    web = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(free_port()), "skillrunner.asgi:application"]
    for argv in (web, [sys.executable, "manage.py", "migrate"], [sys.executable, "manage.py", "worker"]):
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        (line,) = done.stderr.splitlines()
        assert line.startswith("skillrunner: cannot prepare the data directory") and "Not a directory" in line
