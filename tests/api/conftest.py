"""Fixtures of the API suite: held-back dispatch, turns in background threads, a probing engine wrapper."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.conftest import FAKE_CODEX

from .helpers import process_alive, write_executable


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
def probing_codex(fake_codex, configure_engine, tmp_path) -> ProbingCodex:
    root = tmp_path / "probing-codex"
    root.mkdir()
    probe = ProbingCodex(fake_codex, root)
    configure_engine("codex", binary=str(probe.binary))
    yield probe
    for spawn in probe.spawns():  # never leave a test's sleepers behind, whatever it asserted
        if process_alive(spawn["child"]):
            os.kill(spawn["child"], signal.SIGKILL)
