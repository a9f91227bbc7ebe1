"""Engine processes: own group, closed stdin, allow-listed env, timeout/abort kills (R-EN5, R-LC11, R-LC12)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engines.process import CappedBuffer, kill_process_group, run_process
from engines.registry import get_adapter
from engines.types import FAILURE_ABORTED, FAILURE_SPAWN, FAILURE_TIMEOUT

from .fakes import FakeControl, make_config, make_request, wait_gone, write_script

ENV = {"PATH": "/usr/bin:/bin"}


def _pids(path: Path) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= 2:
            return [int(pid) for pid in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the test process did not write its pids")


def test_hard_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    control = FakeControl()
    started = time.monotonic()
    result = run_process(
        ["sh", "-c", f"sleep 60 & echo $! > {pids}; sleep 60 & echo $! >> {pids}; wait"],
        cwd=tmp_path,
        env=ENV,
        control=control,
        hard_timeout=0.5,
        grace=1.0,
    )
    assert result.failure_reason == FAILURE_TIMEOUT
    assert time.monotonic() - started < 10
    children = _pids(pids)
    assert wait_gone(children + control.pids), "a child of the engine survived the timeout"
    assert control.pids == [result.pid]


def test_hard_timeout_also_kills_descendants_that_left_the_group(tmp_path: Path) -> None:
    """Gemini runs its shell tool detached (own session); such commands must die with the turn."""
    pids = tmp_path / "pids"
    started = time.monotonic()
    result = run_process(
        ["sh", "-c", f"echo $$ > {pids}; setsid sleep 60 & echo $! >> {pids}; wait"],
        cwd=tmp_path,
        env=ENV,
        control=FakeControl(),
        hard_timeout=0.5,
        grace=1.0,
    )
    assert result.failure_reason == FAILURE_TIMEOUT
    assert time.monotonic() - started < 10  # the detached child held the pipes until it was killed
    leader, detached = _pids(pids)
    assert wait_gone([leader, detached])


def test_timeout_escalates_to_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_process(
        ["sh", "-c", "trap '' TERM; sleep 60"],  # sleep inherits the ignored SIGTERM
        cwd=tmp_path,
        env=ENV,
        control=FakeControl(),
        hard_timeout=0.3,
        grace=0.5,
    )
    elapsed = time.monotonic() - started
    assert result.failure_reason == FAILURE_TIMEOUT
    assert 0.7 <= elapsed < 5
    assert result.exit_code == -9


def test_abort_kills_the_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    control = FakeControl(abort_after=0.4)
    started = time.monotonic()
    result = run_process(
        ["sh", "-c", f"echo $$ > {pids}; sleep 60 & echo $! >> {pids}; wait"],
        cwd=tmp_path,
        env=ENV,
        control=control,
        hard_timeout=30,
    )
    assert result.failure_reason == FAILURE_ABORTED
    assert time.monotonic() - started < 10
    assert wait_gone(_pids(pids))


def test_runs_in_cwd_with_closed_stdin_and_only_the_given_env(tmp_path: Path) -> None:
    script = "import json, os, sys; print(json.dumps({'cwd': os.getcwd(), 'stdin': sys.stdin.read(), 'env': dict(os.environ), 'pgid': os.getpgid(0), 'pid': os.getpid()}))"
    result = run_process(
        ["python3", "-c", script], cwd=tmp_path, env={**ENV, "ONLY": "1"}, control=FakeControl(), hard_timeout=30
    )
    seen = json.loads(result.stdout)
    assert seen["cwd"] == str(tmp_path)
    assert seen["stdin"] == ""
    assert {key for key in seen["env"] if key != "LC_CTYPE"} == {"PATH", "ONLY"}
    assert seen["pgid"] == seen["pid"] == result.pid  # its own process group
    assert result.exit_code == 0 and result.failure_reason is None


def test_leftover_children_holding_the_pipes_do_not_block_the_turn(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    started = time.monotonic()
    result = run_process(
        ["sh", "-c", f"echo $$ > {pids}; sleep 60 & echo $! >> {pids}; echo done"],
        cwd=tmp_path,
        env=ENV,
        control=FakeControl(),
        hard_timeout=30,
    )
    assert result.stdout == "done\n" and result.exit_code == 0
    assert time.monotonic() - started < 10
    assert wait_gone(_pids(pids))


def test_an_unreachable_pipe_holder_does_not_hang_the_turn(tmp_path: Path) -> None:
    """A detached child that outlives the engine and keeps stdout open is given up on."""
    pids = tmp_path / "pids"
    started = time.monotonic()
    result = run_process(
        ["sh", "-c", f"setsid sleep 30 & echo $! > {pids}; echo $$ >> {pids}; echo done"],
        cwd=tmp_path,
        env=ENV,
        control=FakeControl(),
        hard_timeout=30,
    )
    holder, _ = _pids(pids)
    try:
        assert result.stdout == "done\n" and result.exit_code == 0
        assert time.monotonic() - started < 10
    finally:
        os.kill(holder, signal.SIGKILL)


def test_missing_binary_is_a_spawn_failure(tmp_path: Path) -> None:
    control = FakeControl()
    result = run_process(["no-such-engine-cli"], cwd=tmp_path, env=ENV, control=control, hard_timeout=5)
    assert result.failure_reason == FAILURE_SPAWN
    assert "no-such-engine-cli" in result.message and "not found" in result.message
    assert control.pids == []


@pytest.mark.parametrize("engine", ["codex", "gemini", "iflow", "claude"])
def test_run_turn_with_missing_binary_reports_engine_spawn_failed(tmp_path: Path, engine: str) -> None:
    result = get_adapter(engine).run_turn(
        make_request(tmp_path), make_config(tmp_path, tmp_path / "missing" / engine), FakeControl()
    )
    assert result.outcome == "error"
    assert result.failure_reason == FAILURE_SPAWN
    assert "does not exist" in result.failure_message


def test_output_is_capped_keeping_head_and_tail() -> None:
    buffer = CappedBuffer(limit=10)
    for chunk in (b"HEAD-", b"middle-" * 100, b"-TAIL"):
        buffer.write(chunk)
    text = buffer.take()
    assert text.startswith("HEAD-") and text.endswith("-TAIL")
    assert "bytes omitted" in text
    assert buffer.take() == ""


def test_large_output_is_read_to_eof_and_capped(tmp_path: Path) -> None:
    result = run_process(
        [
            "python3",
            "-c",
            "import sys; sys.stdout.write('{\"first\": 1}\\n' + 'x' * (9 * 1024 * 1024) + '\\n{\"last\": 2}\\n')",
        ],
        cwd=tmp_path,
        env=ENV,
        control=FakeControl(),
        hard_timeout=30,
    )
    assert result.exit_code == 0
    assert len(result.stdout) < 5 * 1024 * 1024
    assert result.stdout.startswith('{"first": 1}') and result.stdout.endswith('{"last": 2}\n')


def test_kill_process_group_for_orphan_cleanup(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    kill_process_group(proc.pid, grace=1.0)
    proc.wait(timeout=5)
    assert proc.returncode is not None
    kill_process_group(proc.pid, grace=0.1)  # a group that is already gone is not an error


def test_run_turn_end_to_end_with_a_fake_gemini(tmp_path: Path) -> None:
    """The adapter runs the CLI in the run dir, with its home env, and reads its answer."""
    binary = write_script(
        tmp_path / "gemini",
        "import json, os, sys\n"
        "print('YOLO mode is enabled.')\n"
        "print(json.dumps({'session_id': 'g-1', 'response': json.dumps({'cwd': os.getcwd(), 'argv': sys.argv[1:], 'env': dict(os.environ)})}, indent=2))\n",
        interpreter="python",
    )
    config = make_config(tmp_path, binary, api_key="secret-key", base_url="http://127.0.0.1:9")
    request = make_request(tmp_path, "auto", prompt="go")
    control = FakeControl()
    result = get_adapter("gemini").run_turn(request, config, control)
    assert result.outcome == "final", result.failure_message
    assert result.session_handle == "g-1"
    assert result.command == [str(binary), "--yolo", "--output-format", "json", "-p", "go"]
    assert result.exit_code == 0 and control.pids
    data = result.final_data
    assert data is not None
    assert data["cwd"] == str(request.run_dir)
    assert data["env"]["GEMINI_API_KEY"] == "secret-key"
    assert data["env"]["HOME"].startswith(str(config.home))
    assert (request.run_dir / ".gemini" / "skills" / "demo-skill" / "SKILL.md").exists()
    assert os.environ.get("PYTEST_CURRENT_TEST") and "PYTEST_CURRENT_TEST" not in data["env"]
