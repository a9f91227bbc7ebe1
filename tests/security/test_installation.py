"""Settings without side effects, and the explicit startup step (issue 9; R-FS3): importing the
settings writes nothing and reads no command line; `prepare_installation` creates the data
directory privately and the secret key atomically with mode 0600, once."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skillrunner import startup

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
    prepare = "from skillrunner.startup import prepare_installation; prepare_installation()"
    for command in (["shell", "-c", prepare], ["migrate", "--no-input"], ["shell", "-c", code]):
        done = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    assert _mode(data_dir / "skillrunner.sqlite3") == 0o600
    assert _mode(data_dir) == 0o700
    assert _mode(data_dir / "runs") == 0o700 and _mode(data_dir / "runs" / "r1" / "f") == 0o600
