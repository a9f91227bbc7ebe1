"""The adapters' parsers on output recorded from the real CLIs (tests/engines/golden, see its manifest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.registry import get_adapter
from engines.types import FAILURE_ENGINE
from tests.engines.fakes import FakeControl, make_config, make_request, write_script

GOLDEN = Path(__file__).resolve().parent / "golden"
MANIFEST = (
    json.loads((GOLDEN / "manifest.json").read_text()) if (GOLDEN / "manifest.json").exists() else {"recordings": []}
)
RECORDINGS = {(r["engine"], r["scenario"]): r for r in MANIFEST["recordings"]}

pytestmark = pytest.mark.skipif(not RECORDINGS, reason="no golden recordings in tests/engines/golden")


def recorded(engine: str, scenario: str) -> tuple[str, str, int]:
    record = RECORDINGS[(engine, scenario)]
    read = lambda ext: (GOLDEN / engine / f"{scenario}.{ext}").read_text(encoding="utf-8")  # noqa: E731
    return read("stdout"), read("stderr"), record["returncode"]


@pytest.mark.parametrize(
    "engine,scenario,text",
    [
        ("codex", "plain", "PLAIN_REPLY to: hello there"),
        ("codex", "resume_turn1", "REPLY turns=1 last=first message"),
        ("codex", "resume_turn2", "REPLY turns=2 last=second message"),
        ("gemini", "plain", "PLAIN_REPLY to: hello there"),
        ("gemini", "resume_turn1", "REPLY turns=1 last=first message"),
        ("gemini", "resume_turn2", "REPLY turns=2 last=second message"),
        ("qwen", "plain", "PLAIN_REPLY to: hello there"),
        ("qwen", "resume_turn1", "REPLY turns=1 last=first message"),
        ("qwen", "resume_turn2", "REPLY turns=2 last=second message"),
        ("opencode", "plain", "PLAIN_REPLY to: hello there"),
        ("opencode", "resume_turn1", "REPLY turns=1 last=first message"),
        ("opencode", "resume_turn2", "REPLY turns=2 last=second message"),
        ("kilo", "plain", "PLAIN_REPLY to: hello there"),
        ("kilo", "resume_turn1", "REPLY turns=1 last=first message"),
        ("kilo", "resume_turn2", "REPLY turns=2 last=second message"),
    ],
)
def test_golden_plain_text_turns(engine: str, scenario: str, text: str) -> None:
    interactive = get_adapter(engine).parse(*recorded(engine, scenario), "interactive")
    assert interactive.assistant_text == text
    assert interactive.session_handle
    assert interactive.outcome == "ask_user" and interactive.interaction is None  # plain text = a question
    auto = get_adapter(engine).parse(*recorded(engine, scenario), "auto")
    assert auto.outcome == "final" and auto.final_data is None


@pytest.mark.parametrize("engine", ["codex", "gemini", "qwen", "opencode", "kilo"])
def test_golden_resume_keeps_the_session_handle(engine: str) -> None:
    first = get_adapter(engine).parse(*recorded(engine, "resume_turn1"), "interactive")
    second = get_adapter(engine).parse(*recorded(engine, "resume_turn2"), "interactive")
    assert first.session_handle == second.session_handle
    assert second.session_handle in RECORDINGS[(engine, "resume_turn2")]["note"]


@pytest.mark.parametrize("engine", ["codex", "gemini", "claude", "qwen", "opencode", "kilo"])
def test_golden_tool_call_output_is_not_the_final_message(engine: str) -> None:
    result = get_adapter(engine).parse(*recorded(engine, "tool_call"), "interactive")
    assert result.assistant_text.startswith("TOOL_RESULT_SEEN")
    assert result.session_handle


@pytest.mark.parametrize(
    "engine,scenario",
    [
        ("codex", "turn_failed_500"),
        ("gemini", "error_500"),
        ("claude", "error_500"),
        ("qwen", "error_400"),
        ("opencode", "error_400"),
        ("kilo", "error_500"),
    ],
)
def test_golden_http_error_is_an_engine_failure(engine: str, scenario: str) -> None:
    result = get_adapter(engine).parse(*recorded(engine, scenario), "interactive")
    assert result.outcome == "error" and result.failure_reason == FAILURE_ENGINE
    assert result.failure_message
    assert result.session_handle


@pytest.mark.parametrize(
    "engine,scenario,message",
    [
        ("gemini", "error_500", "scripted HTTP 500"),
        ("qwen", "error_400", "scripted bad request"),
        ("opencode", "error_400", "scripted HTTP 400"),
        ("kilo", "error_500", "scripted HTTP 500"),
    ],
)
def test_golden_error_result_event_names_the_error(engine: str, scenario: str, message: str) -> None:
    result = get_adapter(engine).parse(*recorded(engine, scenario), "auto")
    assert message in result.failure_message


def activity_of(engine: str, scenario: str) -> list[dict]:
    """The items the adapter's incremental parser yields, fed the recording line by line (R-AC1)."""
    parser = get_adapter(engine).activity_parser()
    stdout = recorded(engine, scenario)[0]
    return [item for line in stdout.splitlines() for item in parser.feed(line)]


@pytest.mark.parametrize("engine", ["codex", "gemini", "claude", "qwen", "opencode", "kilo"])
def test_golden_tool_call_activity(engine: str) -> None:
    """R-AC1: a recorded tool call yields started then finished with its command and output."""
    items = activity_of(engine, "tool_call")
    tools = [item for item in items if item["type"] == "tool"]
    assert [tool["phase"] for tool in tools] == ["started", "finished"]
    started, finished = tools
    assert started["id"] == finished["id"] and started["id"]
    assert f"echo hi-from-{engine} > out.txt" in started["command"] == finished["command"]
    assert finished["status"] == "ok" and finished["output"].strip().endswith(f"hi-from-{engine}")
    assert isinstance(finished["duration_ms"], int) and finished["duration_ms"] >= 0
    # The final answer is the turn result, never an activity message.
    assert not [item for item in items if item["type"] == "message"]


@pytest.mark.parametrize("engine", ["codex", "claude", "qwen"])
def test_golden_reasoning_activity_comes_before_the_tool(engine: str) -> None:
    """R-AC1: the scripted reasoning summary (Gemini 0.61 prints none in stream-json)."""
    items = activity_of(engine, "tool_call")
    assert items[0] == {"type": "reasoning", "text": "I will write the file first."}
    assert items[1]["type"] == "tool"


@pytest.mark.parametrize("engine", ["opencode", "kilo"])
def test_golden_opencode_reasoning_arrives_while_the_tool_runs(engine: str) -> None:
    """OpenCode (and Kilo) print a reasoning part once the stream has moved on, by which time the
    plugin has already announced the tool: the reasoning comes between the tool's start and end."""
    items = activity_of(engine, "tool_call")
    assert [(item["type"], item.get("phase")) for item in items] == [
        ("tool", "started"),
        ("reasoning", None),
        ("tool", "finished"),
    ]
    assert items[1]["text"] == "I will write the file first."


@pytest.mark.parametrize(
    "engine,scenario,expected",
    [
        ("codex", "tool_call", {"input_tokens": 35, "output_tokens": 50, "reasoning_tokens": 7, "cost_usd": None}),
        ("gemini", "tool_call", {"input_tokens": 35, "output_tokens": 37, "cached_input_tokens": 0}),
        ("claude", "tool_call", {"input_tokens": 35, "cached_input_tokens": 0}),
        ("qwen", "tool_call", {"input_tokens": 35, "output_tokens": 61, "cached_input_tokens": 0, "cost_usd": None}),
        # The resumed turn's own tokens: its result event counts the first turn's as well.
        ("qwen", "resume_turn2", {"input_tokens": 25, "output_tokens": 8}),
        ("opencode", "tool_call", {"input_tokens": 35, "output_tokens": 26, "reasoning_tokens": 7, "cost_usd": None}),
        ("kilo", "tool_call", {"input_tokens": 35, "reasoning_tokens": 7, "cost_usd": None}),
    ],
)
def test_golden_usage(engine: str, scenario: str, expected: dict) -> None:
    """R-AC4: token counts as each engine reports them, unreported keys None."""
    usage = get_adapter(engine).parse(*recorded(engine, scenario), "interactive").usage
    assert usage is not None
    assert {key: usage[key] for key in expected} == expected
    assert set(usage) == {"input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "cost_usd"}


def test_golden_claude_cost_is_reported() -> None:
    usage = get_adapter("claude").parse(*recorded("claude", "tool_call"), "interactive").usage
    assert usage["cost_usd"] is not None and usage["cost_usd"] > 0


def test_golden_claude_resident_replayed_through_a_resident_session(tmp_path: Path) -> None:
    """A stand-in binary replays the recorded resident process: one result-terminated chunk of
    the real stdout per stdin message."""
    recording = GOLDEN / "claude" / "resident_two_turns.stdout"
    binary = write_script(
        tmp_path / "claude",
        "import json, sys\n"
        f"lines = open({str(recording)!r}).read().splitlines(keepends=True)\n"
        "for _ in sys.stdin:\n"
        "    while lines:\n"
        "        line = lines.pop(0)\n"
        "        sys.stdout.write(line); sys.stdout.flush()\n"
        "        if json.loads(line).get('type') == 'result':\n"
        "            break\n",
        interpreter="python",
    )
    control = FakeControl()
    session = get_adapter("claude").open_resident_session(
        make_request(tmp_path), make_config(tmp_path, binary), control
    )
    try:
        prompts = RECORDINGS[("claude", "resident_two_turns")]["prompts"]
        first = session.send(prompts[0], control, 10)
        second = session.send(prompts[1], control, 10)
    finally:
        session.close()
    assert first.assistant_text == "REPLY turns=1 last=first message"
    assert second.assistant_text == "REPLY turns=2 last=second message"
    assert first.session_handle == second.session_handle is not None
    assert first.outcome == second.outcome == "ask_user"
    # Claude reports the process's cumulative cost; each turn gets its own share.
    events = [json.loads(line) for line in recording.read_text().splitlines() if '"type":"result"' in line]
    assert first.usage["cost_usd"] == pytest.approx(events[0]["total_cost_usd"])
    assert second.usage["cost_usd"] == pytest.approx(events[1]["total_cost_usd"] - events[0]["total_cost_usd"])
