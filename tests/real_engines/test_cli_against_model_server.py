"""The real Codex, Gemini, Claude, Qwen Code, OpenCode and Kilo CLIs, run offline against the scripted
model server.

Each test starts a fresh server and uses its own temp home and cwd (see conftest.py). A CLI that is
not installed fails the test: ``make test`` installs them with ``make engines``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.engine_env import (
    ENGINES,
    PROMPT_ON_STDIN,
    CliRun,
    ResidentCli,
    claude_argv,
    codex_argv,
    gemini_argv,
    opencode_argv,
    qwen_argv,
    run_cli,
)
from tests.support.scripted_model_server import KIND_TURN

pytestmark = pytest.mark.real_engine

TIMEOUT = 60.0  # hard timeout per CLI run; the process group is killed when it expires


def run_turn(sandbox, prompt: str, resume: str | None = None, timeout: float = TIMEOUT) -> CliRun:
    if sandbox.engine in PROMPT_ON_STDIN:
        return run_cli(opencode_argv(resume, sandbox.engine), sandbox.env, sandbox.cwd, timeout=timeout, stdin=prompt)
    builders = {"codex": codex_argv, "gemini": gemini_argv, "claude": claude_argv, "qwen": qwen_argv}
    argv = builders[sandbox.engine](prompt, resume=resume)
    return run_cli(argv, sandbox.env, sandbox.cwd, timeout=timeout)


def session_and_text(engine: str, run: CliRun) -> tuple[str | None, str | None]:
    """(session id, final assistant text) from one run's stdout."""
    if engine == "gemini":
        doc = run.json_doc()
        return doc.get("session_id"), doc.get("response")
    events = run.json_lines()
    session = text = None
    if engine == "codex":
        for ev in events:
            if ev.get("type") == "thread.started":
                session = ev["thread_id"]
            item = ev.get("item") or {}
            if ev.get("type") == "item.completed" and item.get("type") == "agent_message":
                text = item["text"]
        return session, text
    if engine in PROMPT_ON_STDIN:  # OpenCode, Kilo: every event carries the session; text parts end with the answer
        for ev in events:
            session = session or ev.get("sessionID")
            if ev.get("type") == "text":
                text = ev["part"]["text"]
        return session, text
    for ev in events:  # claude's stream-json, which qwen prints too
        if ev.get("type") == "system" and ev.get("subtype") == "init":
            session = ev["session_id"]
        if ev.get("type") == "result":
            text = ev.get("result")
    return session, text


def turn_requests(server) -> list[Any]:
    return [r for r in server.requests if r.kind == KIND_TURN]


def describe(run: CliRun) -> str:
    return (
        f"rc={run.returncode} timed_out={run.timed_out} {run.duration:.1f}s\n"
        f"--- stdout\n{run.stdout[-3000:]}\n--- stderr\n{run.stderr[-3000:]}"
    )


# (a) a plain text turn --------------------------------------------------------------------------


# Kilo is OpenCode under other names at twice its cost per turn: its resume test below proves
# the same (an exact prompt, the conversation carried on) and the service suites the rest.
LEAN_ENGINES = [engine for engine in ENGINES if engine != "kilo"]


@pytest.mark.parametrize("engine", LEAN_ENGINES)
def test_plain_text_turn(engine, make_sandbox, model_server):
    sandbox = make_sandbox(engine)
    model_server.set_script([{"text": "PLAIN_REPLY to: {user_text}"}])

    run = run_turn(sandbox, "hello there")

    assert run.returncode == 0 and not run.timed_out, describe(run)
    session, text = session_and_text(engine, run)
    assert session, describe(run)
    assert text == "PLAIN_REPLY to: hello there"
    turns = turn_requests(model_server)
    assert len(turns) == 1
    assert turns[0].user_texts == ["hello there"]
    assert turns[0].model_outputs == 0


# (b) a tool call that writes a file -----------------------------------------------------------


@pytest.mark.parametrize("engine", LEAN_ENGINES)
def test_tool_call_writes_file(engine, make_sandbox, model_server):
    sandbox = make_sandbox(engine)
    marker = f"hi-from-{engine}"
    model_server.set_script(
        [
            {"shell": f"echo {marker} > out.txt && cat out.txt"},
            {"text": "TOOL_RESULT_SEEN: {tool_output}"},
        ]
    )

    run = run_turn(sandbox, "please write the file")

    assert run.returncode == 0 and not run.timed_out, describe(run)
    assert (sandbox.cwd / "out.txt").read_text().strip() == marker
    turns = turn_requests(model_server)
    assert [t.step_index for t in turns] == [0, 1]
    assert any(marker in result for result in turns[1].tool_results), turns[1].tool_results
    _, text = session_and_text(engine, run)
    assert text and text.startswith("TOOL_RESULT_SEEN:") and marker in text


# (c) a first turn plus a resumed turn ---------------------------------------------------------

RESUME_SCRIPT = [{"text": "REPLY turns={user_turns} last={user_text}"}]


@pytest.mark.parametrize("engine", ["codex", "gemini", "qwen", "opencode", "kilo"])
def test_resume_sends_earlier_conversation(engine, make_sandbox, model_server):
    sandbox = make_sandbox(engine)
    model_server.set_script(RESUME_SCRIPT)

    first = run_turn(sandbox, "first message")
    assert first.returncode == 0, describe(first)
    session, text = session_and_text(engine, first)
    assert session and text == "REPLY turns=1 last=first message"

    # Same cwd: Gemini's resume is scoped to the project directory.
    second = run_turn(sandbox, "second message", resume=session)
    assert second.returncode == 0, describe(second)
    if engine == "gemini":  # catches its stale projects.json.lock (the next run would start 13+ s late)
        assert second.duration < 10, describe(second)
    session2, text2 = session_and_text(engine, second)
    assert session2 == session
    assert text2 == "REPLY turns=2 last=second message"

    last = turn_requests(model_server)[-1]
    assert last.user_texts == ["first message", "second message"]
    assert last.model_outputs == 1  # the first turn's answer came back in the history


def test_claude_resident_process_two_turns(make_sandbox, model_server):
    sandbox = make_sandbox("claude")
    model_server.set_script(RESUME_SCRIPT)
    is_result = lambda ev: ev.get("type") == "result"  # noqa: E731

    with ResidentCli(claude_argv(), sandbox.env, sandbox.cwd) as cli:
        cli.send_user_text("first message")
        first = cli.read_until(is_result, timeout=TIMEOUT)
        assert first[-1]["result"] == "REPLY turns=1 last=first message", cli.stderr
        assert cli.proc.poll() is None, "the resident process must survive the end of a turn"

        cli.send_user_text("second message")
        second = cli.read_until(is_result, timeout=TIMEOUT)
        assert second[-1]["result"] == "REPLY turns=2 last=second message"
        assert second[-1]["session_id"] == first[-1]["session_id"]
        rc = cli.close(timeout=30)

    assert rc == 0, cli.stderr
    last = turn_requests(model_server)[-1]
    assert last.user_texts == ["first message", "second message"]
    assert last.model_outputs == 1


# (d) an HTTP error from the model ends the CLI quickly with a non-zero exit --------------------

# Qwen Code 0.24 retries a 5xx 7 times with backoff (about 80 s), OpenCode 5 times (about a
# minute), whatever their settings say; a 400 is not retried, so it shows the same fast failure.
ERROR_STATUS = {"qwen": 400, "opencode": 400}


@pytest.mark.parametrize("engine", LEAN_ENGINES)
def test_http_error_fails_fast(engine, make_sandbox, model_server):
    sandbox = make_sandbox(engine)
    status = ERROR_STATUS.get(engine, 500)
    model_server.set_script([{"http_error": status}])

    run = run_turn(sandbox, "this will fail", timeout=30)

    assert not run.timed_out, describe(run)
    assert run.returncode != 0, describe(run)
    assert run.duration < 15, describe(run)
    turns = turn_requests(model_server)
    assert turns and all(t.status == status for t in turns)
    assert len(turns) == 1, "retries should be disabled by the test config"
    if engine == "codex":
        assert [e["type"] for e in run.json_lines()][-1] == "turn.failed"
    elif engine in ("claude", "qwen"):
        result = [e for e in run.json_lines() if e.get("type") == "result"][-1]
        assert result["is_error"] is True
    elif engine in PROMPT_ON_STDIN:
        assert [e["type"] for e in run.json_lines()] == ["error"]
    else:  # gemini --output-format json writes its error document to STDERR, stdout stays empty
        assert '"error"' in run.stderr and run.stdout.strip() == ""


# Hard timeout: a model that never answers must not hang the harness ---------------------------


def test_hard_timeout_kills_a_hung_turn(make_sandbox, model_server):
    sandbox = make_sandbox("codex")
    model_server.set_script([{"delay": 30, "text": "too late"}])

    started = time.monotonic()
    run = run_turn(sandbox, "hang please", timeout=3)

    assert run.timed_out
    assert time.monotonic() - started < 15
    assert len(turn_requests(model_server)) == 1
