"""A codex binary that records how the service started it (process group, stdin, cwd), then runs the scripted fake."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.jobs import processes_in, write_executable
from tests.support.processes import kill_all


class ProbingCodex:
    """A codex binary that records how it was started (as the engine sees it), leaves a child
    behind, then becomes the scripted fake (exec keeps the pid). It records into its engine home,
    the one place besides the run directory a sandboxed engine may write."""

    def __init__(self, fake, data_dir: Path):
        self.fake = fake
        self.data_dir = data_dir
        root = fake.root  # the engine's install: the sandbox shows it read-only, with the script
        fake_module = root / "fake_codex.py"
        probe = write_executable(
            root / "probe.py",
            f"""import json, os, subprocess, sys
argv = sys.argv[1:]
if argv[:1] == ["exec"] and "--help" not in argv:
    child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(os.environ["CODEX_HOME"], "spawn.jsonl"), "a") as log:
        log.write(json.dumps({{
            "pid": os.getpid(), "pgid": os.getpgrp(), "sid": os.getsid(0), "child": child.pid,
            "stdin": os.readlink("/proc/self/fd/0"), "cwd": os.getcwd(),
        }}) + "\\n")
os.execv(sys.executable, [sys.executable, {str(fake_module)!r}, {str(fake.script_file)!r}, *argv])
""",
        )
        self.binary = write_executable(
            root / "codex-probing",
            f'#!/bin/sh\nPY=/usr/bin/python3\n[ -x "$PY" ] || PY="{sys.executable}"\nexec "$PY" -I "{probe}" "$@"\n',
        )

    def spawns(self) -> list[dict]:
        records = sorted((self.data_dir / "engine-homes" / "codex").glob("*/spawn.jsonl"))
        return [json.loads(line) for record in records for line in record.read_text().splitlines()]


@pytest.fixture
def probing_codex(fake_codex, configure_engine, settings) -> ProbingCodex:
    probe = ProbingCodex(fake_codex, settings.DATA_DIR)
    configure_engine("codex", binary=str(probe.binary))
    yield probe
    kill_all(processes_in(settings.DATA_DIR))  # never leave a test's sleepers behind, whatever it asserted
