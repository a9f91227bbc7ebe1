"""Engine processes: own group, closed stdin, allow-listed env, timeout/abort kills (R-EN5, R-LC11, R-LC12)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engines.process import MAX_LINE_BYTES, CappedBuffer, LineSplitter, kill_process_group, pid_alive, run_process
from engines.registry import get_adapter
from engines.types import FAILURE_ABORTED, FAILURE_SPAWN, FAILURE_TIMEOUT
from tests.engines.fakes import FakeControl, make_config, make_request, wait_gone, write_script

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


def test_stdin_text_is_read_whole_then_end_of_file(tmp_path: Path) -> None:
    """A prompt on stdin (OpenCode alters one given as an argument): every byte, then EOF, even
    past a pipe's buffer, and a process that never reads it still finishes."""
    prompt = 'say "hi"\n-5 °C\n' + "x" * 200_000
    script = "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    result = run_process(
        ["python3", "-c", script], cwd=tmp_path, env=ENV, control=FakeControl(), hard_timeout=30, stdin_text=prompt
    )
    assert result.stdout == hashlib.sha256(prompt.encode()).hexdigest() + "\n"
    ignored = run_process(["true"], cwd=tmp_path, env=ENV, control=FakeControl(), hard_timeout=30, stdin_text=prompt)
    assert ignored.exit_code == 0 and ignored.failure_reason is None


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


@pytest.mark.parametrize("engine", ["codex", "gemini", "iflow", "claude", "qwen", "opencode", "kilo"])
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


def test_pid_alive_tells_live_from_gone_and_never_names_a_group() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_alive(proc.pid)
        assert pid_alive(1)  # init: run by a non-root user, this is another user's (PermissionError)
    finally:
        proc.kill()
        proc.wait(timeout=5)
    assert not pid_alive(proc.pid)
    # os.kill reads 0 as this process's group and -1 as every process: neither is one process.
    assert not pid_alive(0) and not pid_alive(-1) and not pid_alive(None)


def test_run_turn_end_to_end_with_a_fake_gemini(tmp_path: Path) -> None:
    """The adapter runs the CLI in the run dir, with its home env, and reads its answer."""
    binary = write_script(
        tmp_path / "gemini",
        "import json, os, sys\n"
        "print('YOLO mode is enabled.')\n"
        "print(json.dumps({'type': 'init', 'session_id': 'g-1'}))\n"
        "answer = json.dumps({'cwd': os.getcwd(), 'argv': sys.argv[1:], 'env': dict(os.environ)})\n"
        "print(json.dumps({'type': 'message', 'role': 'assistant', 'content': answer, 'delta': True}))\n"
        "print(json.dumps({'type': 'result', 'status': 'success', 'stats': {}}))\n",
        interpreter="python",
    )
    config = make_config(tmp_path, binary, api_key="secret-key", base_url="http://127.0.0.1:9")
    request = make_request(tmp_path, "auto", prompt="go")
    control = FakeControl()
    result = get_adapter("gemini").run_turn(request, config, control)
    assert result.outcome == "final", result.failure_message
    assert result.session_handle == "g-1"
    assert result.command == [str(binary), "--yolo", "--output-format", "stream-json", "-p", "go"]
    assert result.exit_code == 0 and control.pids
    data = result.final_data
    assert data is not None
    assert data["cwd"] == str(request.run_dir)
    assert data["env"]["GEMINI_API_KEY"] == "secret-key"
    assert data["env"]["HOME"].startswith(str(config.home))
    assert (request.run_dir / ".gemini" / "skills" / "demo-skill" / "SKILL.md").exists()
    assert os.environ.get("PYTEST_CURRENT_TEST") and "PYTEST_CURRENT_TEST" not in data["env"]


class UnblockingControl(FakeControl):
    """Creates ``marker`` when the first activity item arrives: the fake engine waits for it."""

    def __init__(self, marker: Path) -> None:
        super().__init__()
        self.marker = marker

    def on_activity(self, item: dict) -> None:
        super().on_activity(item)
        self.marker.touch()


def test_activity_arrives_while_the_engine_still_runs(tmp_path: Path) -> None:
    """R-AC1: stdout lines are parsed as printed. The fake Codex prints a tool start, then waits
    (bounded) for a file the test's control creates only on seeing that activity."""
    marker = tmp_path / "seen"
    binary = write_script(
        tmp_path / "codex",
        "import json, os, sys, time\n"
        "if sys.argv[1:2] != ['exec']: sys.exit(0)\n"
        "emit = lambda e: (print(json.dumps(e)), sys.stdout.flush())\n"
        "emit({'type': 'thread.started', 'thread_id': 't-1'})\n"
        "emit({'type': 'item.started', 'item': {'id': 'c1', 'type': 'command_execution', 'command': 'ls'}})\n"
        f"deadline = time.monotonic() + 10\n"
        f"while not os.path.exists({str(marker)!r}) and time.monotonic() < deadline: time.sleep(0.01)\n"
        "seen = os.path.exists(%r)\n"
        "emit({'type': 'item.completed', 'item': {'id': 'c1', 'type': 'command_execution', 'command': 'ls',"
        " 'aggregated_output': 'a\\n', 'exit_code': 0, 'status': 'completed'}})\n"
        "emit({'type': 'item.completed', 'item': {'id': 'm', 'type': 'agent_message', 'text': f'seen={seen}'}})\n"
        "emit({'type': 'turn.completed', 'usage': {'input_tokens': 3, 'output_tokens': 1}})\n" % str(marker),
        interpreter="python",
    )
    control = UnblockingControl(marker)
    result = get_adapter("codex").run_turn(make_request(tmp_path, "auto"), make_config(tmp_path, binary), control)
    assert result.assistant_text == "seen=True"
    assert [(item["type"], item.get("phase")) for item in control.activity] == [
        ("tool", "started"),
        ("tool", "finished"),
    ]
    assert control.activity[1]["output"] == "a\n" and control.activity[1]["exit_code"] == 0
    assert result.usage["input_tokens"] == 3 and result.usage["cached_input_tokens"] is None
    assert control.output["stdout"].decode() == result.stdout  # every raw byte reached the control too


def test_line_splitter_skips_overlong_lines_and_survives_a_failing_reader() -> None:
    lines: list[bytes] = []

    def reader(line: bytes) -> None:
        if line == b"boom":
            raise RuntimeError("reader bug")
        lines.append(line)

    splitter = LineSplitter(reader)
    for chunk in (b"one\ntw", b"o\nboom\n", b"x" * (MAX_LINE_BYTES + 1), b"y\nthree\nfour"):
        splitter.feed(chunk)
    splitter.close()
    assert lines == [b"one", b"two", b"three", b"four"]
