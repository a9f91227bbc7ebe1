"""Fixtures of the API suite: held-back dispatch, turns in background threads, a probing engine wrapper."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import FAKE_CODEX

from .helpers import process_alive, write_executable


class ManualDispatch:
    """Replaces the task queue: enqueued turns are recorded, and only run when a test says so."""

    def __init__(self) -> None:
        self.enqueued: list[tuple[str, int]] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, request_id, attempt_number: int) -> None:
        self.enqueued.append((str(request_id), attempt_number))

    def run_inline(self, request_id, attempt_number: int = 1) -> None:
        from runs.execution import run_claimed_turn

        run_claimed_turn(str(request_id), attempt_number)

    def run_in_thread(self, request_id, attempt_number: int = 1) -> threading.Thread:
        """The worker side in its own thread (own DB connection), as a django-q2 worker would."""
        from django.db import connection

        def target() -> None:
            try:
                self.run_inline(request_id, attempt_number)
            finally:
                connection.close()

        thread = threading.Thread(target=target, name=f"turn-{request_id}-{attempt_number}", daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread


@pytest.fixture
def manual_dispatch(monkeypatch):
    """Runs created through the API stay queued until the test runs their turn itself."""
    dispatch = ManualDispatch()
    monkeypatch.setattr("runs.services.enqueue_turn", dispatch)
    yield dispatch
    for thread in dispatch.threads:
        thread.join(timeout=15)
    assert not any(t.is_alive() for t in dispatch.threads), "a turn thread outlived its test"


class ProbingCodex:
    """A codex binary that records how it was started, leaves a child in its process group,
    then becomes the scripted fake (exec keeps the pid)."""

    def __init__(self, fake, root: Path):
        self.fake = fake
        self.record = root / "spawn.jsonl"
        self.binary = write_executable(
            root / "codex-probing",
            f"""#!{sys.executable}
import json, os, subprocess, sys
argv = sys.argv[1:]
if argv[:1] == ["exec"] and "--help" not in argv:
    child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open({str(root / "spawn.jsonl")!r}, "a") as log:
        log.write(json.dumps({{
            "pid": os.getpid(), "pgid": os.getpgrp(), "sid": os.getsid(0), "child": child.pid,
            "stdin": os.readlink("/proc/self/fd/0"), "cwd": os.getcwd(),
        }}) + "\\n")
os.execv(sys.executable, [sys.executable, {str(FAKE_CODEX)!r}, {str(fake.script_file)!r}, *argv])
""",
        )

    def spawns(self) -> list[dict]:
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []


@pytest.fixture
def probing_codex(fake_codex, settings, tmp_path) -> ProbingCodex:
    root = tmp_path / "probing-codex"
    root.mkdir()
    probe = ProbingCodex(fake_codex, root)
    engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
    engines["codex"]["binary"] = str(probe.binary)
    settings.SKILLRUNNER_ENGINES = engines
    yield probe
    for spawn in probe.spawns():  # never leave a test's sleepers behind, whatever it asserted
        if process_alive(spawn["child"]):
            os.kill(spawn["child"], signal.SIGKILL)
