"""Claude Code as a sticky_process: one resident process, one stdin message per turn (R-LC7)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engines.claude import ClaudeAdapter
from engines.registry import get_adapter
from engines.types import FAILURE_ENGINE, FAILURE_PROCESS_LOST, FAILURE_SPAWN, FAILURE_TIMEOUT
from tests.engines.fakes import FakeControl, make_config, make_request, wait_gone, write_script

# Speaks Claude Code's stream-json: init once, then per user line an assistant event and a result.
FAKE_CLAUDE = r"""
import json, os, sys, time

def emit(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()

turn = 0
for line in sys.stdin:
    text = json.loads(line)["message"]["content"][0]["text"]
    turn += 1
    if turn == 1:
        emit({"type": "system", "subtype": "init", "session_id": "live-1", "cwd": os.getcwd()})
    if text == "SLEEP":
        time.sleep(60)
    if text == "EXIT":
        sys.exit(3)
    if text == "ENV":
        text = json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()})
    elif text == "FINISH":
        text = json.dumps({"ok": True, "turns": turn, "__SKILL_DONE__": True})
    elif text != "FAIL":
        text = "turn %d got: %s" % (turn, text)
    emit({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}, "session_id": "live-1"})
    emit({"session_id": "live-1", "is_error": text == "FAIL", "subtype": "success", "result": text, "type": "result"})
"""


@pytest.fixture
def claude(tmp_path: Path) -> tuple[ClaudeAdapter, object]:
    adapter = get_adapter("claude")
    assert isinstance(adapter, ClaudeAdapter)
    binary = write_script(tmp_path / "claude", FAKE_CLAUDE, interpreter="python")
    return adapter, make_config(tmp_path, binary, api_key="anthropic-key", base_url="http://127.0.0.1:9")


def test_resident_session_keeps_one_process_across_turns(tmp_path: Path, claude) -> None:
    adapter, config = claude
    control = FakeControl()
    session = adapter.open_resident_session(make_request(tmp_path, "interactive"), config, control)
    try:
        first = session.send("Which colour?", control, 10)
        assert first.outcome == "ask_user" and first.assistant_text == "turn 1 got: Which colour?"
        assert first.session_handle == "live-1"
        assert first.exit_code is None and session.is_alive()
        second = session.send("FINISH", control, 10)
        assert second.outcome == "final" and second.done_marker_found
        assert second.final_data == {"ok": True, "turns": 2}  # same process: it remembers turn 1
        assert json.loads(second.stdout.splitlines()[-1])["type"] == "result"
        assert "turn 1" not in second.stdout  # each result carries only its own turn's events
        assert len(control.pids) == 1
    finally:
        session.close()
    assert not session.is_alive()
    assert wait_gone(control.pids)


def test_resident_session_command_env_and_stdin_protocol(tmp_path: Path, claude) -> None:
    adapter, config = claude
    control = FakeControl()
    request = make_request(tmp_path, "auto")
    session = adapter.open_resident_session(request, config, control)
    try:
        seen = json.loads(session.send("ENV", control, 10).assistant_text)
    finally:
        session.close()
    assert seen["argv"] == [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
    ]
    assert seen["cwd"] == str(request.run_dir)
    env = seen["env"]
    assert env["CLAUDE_CONFIG_DIR"] == str(config.home)
    assert env["ANTHROPIC_API_KEY"] == "anthropic-key" and env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert env["IS_SANDBOX"] == env["DISABLE_AUTOUPDATER"] == env["DISABLE_TELEMETRY"] == "1"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["HOME"].startswith(str(config.home))
    assert (request.run_dir / ".claude" / "skills" / "demo-skill" / "SKILL.md").exists()


def test_run_turn_opens_sends_and_closes(tmp_path: Path, claude) -> None:
    adapter, config = claude
    control = FakeControl()
    result = adapter.run_turn(make_request(tmp_path, "auto", prompt="FINISH"), config, control)
    assert result.outcome == "final" and result.final_data == {"ok": True, "turns": 1}
    assert result.command[1:3] == ["-p", "--input-format"]
    assert wait_gone(control.pids)


def test_per_turn_hard_timeout_kills_the_live_process(tmp_path: Path, claude) -> None:
    adapter, config = claude
    control = FakeControl()
    session = adapter.open_resident_session(make_request(tmp_path), config, control)
    started = time.monotonic()
    result = session.send("SLEEP", control, 0.5)
    assert result.outcome == "error" and result.failure_reason == FAILURE_TIMEOUT
    assert result.session_handle == "live-1"  # init arrived before the hang
    assert time.monotonic() - started < 10
    assert not session.is_alive()
    lost = session.send("hello again", control, 5)
    assert lost.failure_reason == FAILURE_PROCESS_LOST
    session.close()


def test_abort_during_a_live_turn(tmp_path: Path, claude) -> None:
    adapter, config = claude
    session = adapter.open_resident_session(make_request(tmp_path), config, FakeControl())
    result = session.send("SLEEP", FakeControl(abort_after=0.3), 30)
    assert result.failure_reason == "ABORTED"
    assert not session.is_alive()
    session.close()


def test_process_exit_mid_turn_is_an_engine_failure(tmp_path: Path, claude) -> None:
    adapter, config = claude
    control = FakeControl()
    session = adapter.open_resident_session(make_request(tmp_path), config, control)
    result = session.send("EXIT", control, 10)
    assert result.outcome == "error" and result.failure_reason == FAILURE_ENGINE
    assert result.exit_code == 3
    session.close()


def test_result_is_error_keeps_the_process(tmp_path: Path, claude) -> None:
    adapter, config = claude
    control = FakeControl()
    session = adapter.open_resident_session(make_request(tmp_path), config, control)
    try:
        result = session.send("FAIL", control, 10)
        assert result.outcome == "error" and result.failure_message == "FAIL"
        assert session.is_alive()
    finally:
        session.close()


def test_open_resident_session_with_missing_binary_reports_on_send(tmp_path: Path) -> None:
    control = FakeControl()
    session = get_adapter("claude").open_resident_session(
        make_request(tmp_path), make_config(tmp_path, tmp_path / "nope"), control
    )
    result = session.send("hi", control, 5)
    assert result.failure_reason == FAILURE_SPAWN and "does not exist" in result.failure_message
    assert not session.is_alive() and control.pids == []
    session.close()


def test_resumable_engines_have_no_resident_session(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError):
        get_adapter("codex").open_resident_session(
            make_request(tmp_path), make_config(tmp_path, "codex"), FakeControl()
        )
