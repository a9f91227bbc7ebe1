"""Running a few lines of Python in a fresh interpreter under the production settings: how the
settings module reads its environment is decided at import, once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.service_processes import REPO


def run_with_production_settings(code: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -c code` with `skillrunner.settings`, a data dir and key of its own, and `env` on top."""
    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "skillrunner.settings",
        "SKILLRUNNER_DATA_DIR": str(data_dir),
        "SECRET_KEY": "x" * 50,
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=60, cwd=REPO
    )
