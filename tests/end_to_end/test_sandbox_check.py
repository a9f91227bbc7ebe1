"""No turn waits for the sandbox's availability check (R-SB6, #16): the worker checks before its
cluster processes fork, so they start with the answer, and none of them checks in a turn."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.fake_codex import FakeCodex
from tests.support.jobs import haiku_step
from tests.support.service_processes import ServiceProcesses

pytestmark = [pytest.mark.timeout(120)]


def test_cluster_processes_start_with_the_answer(tmp_path):
    real_bwrap = shutil.which("bwrap")
    assert real_bwrap, "bubblewrap is not installed: make system-packages"
    spies = tmp_path / "bin"
    spies.mkdir()
    starts = tmp_path / "bwrap-starts.log"
    # Every bwrap start, with the pid of the process that made it: the check runs /bin/true.
    (spies / "bwrap").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *" -- /bin/true") kind=check ;; *) kind=turn ;; esac\n'
        f'echo "$kind $PPID" >> {starts}\n'
        f'exec {real_bwrap} "$@"\n'
    )
    (spies / "bwrap").chmod(0o755)
    (tmp_path / "engine").mkdir()
    fake = FakeCodex(tmp_path / "engine", tmp_path / "data")
    fake.script(haiku_step())
    service = ServiceProcesses(
        tmp_path / "data",
        env={
            "SKILLRUNNER_CODEX_BIN": str(fake.binary),
            "SKILLRUNNER_MAX_CONCURRENT_TURNS": "3",  # four cluster processes take the runs in turn
            "PATH": f"{spies}{os.pathsep}{os.environ['PATH']}",
        },
    )
    try:
        service.start()
        token = service.token("alice")
        for index in range(6):  # different topics: an identical run would reuse a result (R-OP9)
            job = {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": f"t{index}"}}
            status, body = service.request("POST", "/v1/jobs", token, job)
            assert status == 200, body
            done = service.wait_for_status(token, body["request_id"], {"succeeded", "failed"})
            assert done["status"] == "succeeded", done
    finally:
        service.stop()
    records = [line.split() for line in starts.read_text().splitlines()]
    turns = {pid for kind, pid in records if kind == "turn"}
    checks = {pid for kind, pid in records if kind == "check"}
    assert len([kind for kind, _ in records if kind == "turn"]) == 6
    assert checks, "the worker checks the sandbox before its cluster starts"
    assert not checks & turns, "a process that ran turns checked the sandbox itself"
