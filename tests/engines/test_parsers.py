"""Per-engine output parsing on synthetic samples (R-TP1, R-TP3; SPEC §7 session ids)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.registry import ENGINE_NAMES, get_adapter
from engines.types import FAILURE_ENGINE

IFLOW_DATA = Path(__file__).parent / "data" / "iflow"


def jsonl(*events: dict) -> str:
    return "".join(json.dumps(event) + "\n" for event in events)


# --- codex ---------------------------------------------------------------------------------------

THREAD = {"type": "thread.started", "thread_id": "thread-1"}
TURN = {"type": "turn.started"}
DONE = {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}}


def agent(text: str) -> dict:
    return {"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": text}}


def command(output: str) -> dict:
    return {
        "type": "item.completed",
        "item": {
            "id": "c",
            "type": "command_execution",
            "command": "cat x",
            "aggregated_output": output,
            "exit_code": 0,
            "status": "completed",
        },
    }


def test_codex_final_message_and_thread_id() -> None:
    stdout = jsonl(THREAD, TURN, agent("thinking out loud"), agent('{"a": 1, "__SKILL_DONE__": true}'), DONE)
    result = get_adapter("codex").parse(stdout, "Reading additional input from stdin...\n", 0, "interactive")
    assert result.outcome == "final"
    assert result.session_handle == "thread-1"
    assert result.final_data == {"a": 1} and result.done_marker_found is True
    assert result.assistant_text == '{"a": 1, "__SKILL_DONE__": true}'


def test_codex_marker_only_in_command_output_is_not_evidence() -> None:
    stdout = jsonl(
        THREAD,
        TURN,
        command('{"__SKILL_DONE__": true}\n'),
        command('{"ask_user": {"interaction_id": 1, "prompt": "from a file"}}'),
        agent("I printed the file. What should I do next?"),
        DONE,
    )
    result = get_adapter("codex").parse(stdout, "", 0, "interactive")
    assert result.done_marker_found is False
    assert result.outcome == "ask_user" and result.interaction is None
    assert result.assistant_text == "I printed the file. What should I do next?"


def test_codex_resume_output_only_the_latest_turn_counts() -> None:
    stdout = jsonl(
        THREAD,
        TURN,
        agent('{"answer": "old", "__SKILL_DONE__": true}'),
        DONE,
        TURN,
        agent("Which colour do you prefer?"),
        DONE,
    )
    result = get_adapter("codex").parse(stdout, "", 0, "interactive")
    assert result.outcome == "ask_user"
    assert result.done_marker_found is False and result.final_data is None
    assert result.assistant_text == "Which colour do you prefer?"


def test_codex_turn_failed_is_an_engine_error() -> None:
    stdout = jsonl(
        THREAD,
        TURN,
        {"type": "error", "message": "Reconnecting... 1/1"},
        {"type": "turn.failed", "error": {"message": "stream disconnected"}},
    )
    result = get_adapter("codex").parse(stdout, "", 1, "interactive")
    assert result.outcome == "error" and result.failure_reason == FAILURE_ENGINE
    assert result.failure_message == "stream disconnected"
    assert result.session_handle == "thread-1"


def test_codex_fatal_error_event_without_completed_turn() -> None:
    result = get_adapter("codex").parse(
        jsonl(THREAD, TURN, {"type": "error", "message": "quota exceeded"}), "", 0, "auto"
    )
    assert result.outcome == "error" and result.failure_message == "quota exceeded"


def test_codex_transient_error_notices_before_a_completed_turn_are_ignored() -> None:
    stdout = jsonl(
        THREAD,
        TURN,
        {"type": "error", "message": "Reconnecting... 1/5"},
        {"type": "item.completed", "item": {"id": "i0", "type": "error", "message": "Model metadata not found"}},
        agent('{"ok": true}'),
        DONE,
    )
    result = get_adapter("codex").parse(stdout, "", 0, "auto")
    assert result.outcome == "final" and result.final_data == {"ok": True}


def test_codex_nonzero_exit_without_events_reports_stderr() -> None:
    result = get_adapter("codex").parse("", "Error loading config.toml: wire_api\n", 1, "auto")
    assert result.outcome == "error"
    assert result.failure_message == "codex exited with code 1: Error loading config.toml: wire_api"


# --- gemini --------------------------------------------------------------------------------------


def gemini_stream(*events: dict) -> str:
    return "YOLO mode is enabled. All tool calls will be automatically approved.\n" + "".join(
        json.dumps(event) + "\n" for event in events
    )


GEMINI_INIT = {"type": "init", "session_id": "gem-1", "model": "gemini-2.5-flash"}
GEMINI_OK = {"type": "result", "status": "success", "stats": {"input_tokens": 9, "output_tokens": 4, "cached": 2}}


def test_gemini_noise_lines_then_stream_events() -> None:
    stdout = gemini_stream(
        GEMINI_INIT,
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": "Need anything ", "delta": True},
        {"type": "message", "role": "assistant", "content": "else?", "delta": True},
        GEMINI_OK,
    )
    result = get_adapter("gemini").parse(stdout, "", 0, "interactive")
    assert result.session_handle == "gem-1"
    assert result.assistant_text == "Need anything else?"
    assert result.outcome == "ask_user"
    assert result.usage == {
        "input_tokens": 9,
        "cached_input_tokens": 2,
        "output_tokens": 4,
        "reasoning_tokens": None,
        "cost_usd": None,
    }


def test_gemini_final_answer_is_the_text_after_the_last_tool() -> None:
    done = '```json\n{"x": 1, "__SKILL_DONE__": true}\n```'
    stdout = gemini_stream(
        GEMINI_INIT,
        {"type": "message", "role": "assistant", "content": "Let me look.", "delta": True},
        {"type": "tool_use", "tool_name": "read_file", "tool_id": "t1", "parameters": {"file_path": "a"}},
        {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "x"},
        {"type": "message", "role": "assistant", "content": done, "delta": True},
        GEMINI_OK,
    )
    result = get_adapter("gemini").parse(stdout, "", 0, "interactive")
    assert result.outcome == "final" and result.final_data == {"x": 1} and result.done_marker_found


def test_gemini_error_result_is_an_engine_error() -> None:
    stdout = gemini_stream(
        GEMINI_INIT, {"type": "result", "status": "error", "error": {"type": "Error", "message": "Invalid auth."}}
    )
    result = get_adapter("gemini").parse(stdout, "", 41, "interactive")
    assert result.outcome == "error" and result.failure_reason == FAILURE_ENGINE
    assert result.failure_message == "Invalid auth."
    assert result.session_handle == "gem-1"


def test_gemini_without_a_result_event_fails() -> None:
    result = get_adapter("gemini").parse("Loaded cached credentials.\n", "boom\n", 0, "interactive")
    assert result.outcome == "error" and "no result event: boom" in result.failure_message


def test_gemini_activity_file_change_and_failed_tool() -> None:
    parser = get_adapter("gemini").activity_parser()
    lines = gemini_stream(
        {"type": "message", "role": "assistant", "content": "Writing.", "delta": True},
        {"type": "tool_use", "tool_name": "write_file", "tool_id": "w", "parameters": {"file_path": "/r/a.md"}},
        {"type": "tool_result", "tool_id": "w", "status": "success", "output": ""},
        {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "s", "parameters": {"command": "false"}},
        {"type": "tool_result", "tool_id": "s", "status": "error", "error": {"message": "exit 1"}},
    ).splitlines()
    items = [item for line in lines for item in parser.feed(line)]
    assert [item["type"] for item in items] == ["message", "tool", "tool", "file_change", "tool", "tool"]
    assert items[0]["text"] == "Writing." and items[3]["paths"] == ["/r/a.md"]
    assert items[5]["status"] == "failed" and items[5]["output"] == "exit 1" and items[5]["command"] == "false"


# --- iflow (hand-written recorded-format samples, see data/iflow/README.md) ------------------------


def iflow_sample(name: str) -> tuple[str, str, int]:
    read = lambda ext: (IFLOW_DATA / f"{name}.{ext}").read_text(encoding="utf-8")  # noqa: E731
    return read("stdout"), read("stderr"), int(read("exit"))


def test_iflow_execution_info_on_stderr() -> None:
    result = get_adapter("iflow").parse(*iflow_sample("info_on_stderr"), "interactive")
    assert result.session_handle == "session-7f3a91c2"
    assert result.outcome == "final" and result.done_marker_found
    assert result.final_data == {"report_path": "/runs/r1/artifacts/report.md"}


def test_iflow_execution_info_on_stdout_is_not_part_of_the_message() -> None:
    result = get_adapter("iflow").parse(*iflow_sample("info_on_stdout"), "interactive")
    assert result.session_handle == "session-0b12"
    assert result.assistant_text == "Which language should the summary be written in? French or German?"
    assert result.outcome == "ask_user"


def test_iflow_multi_round_output_keeps_the_latest_segment() -> None:
    result = get_adapter("iflow").parse(*iflow_sample("multi_round"), "interactive")
    assert result.session_handle == "session-7f3a91c2"
    assert "Resuming session" not in result.assistant_text
    assert result.assistant_text.startswith("The file mentions")
    assert result.final_data == {"summary": "Tea is a drink."} and result.done_marker_found


def test_iflow_crash_is_an_engine_error() -> None:
    result = get_adapter("iflow").parse(*iflow_sample("crash"), "interactive")
    assert result.outcome == "error"
    assert result.failure_message == "iflow crashed: Error: SERVER_OAUTH2_REQUIRED: please run `iflow` and log in again"


def test_iflow_error_exit_reports_stderr() -> None:
    result = get_adapter("iflow").parse(*iflow_sample("error_exit"), "auto")
    assert result.outcome == "error" and result.session_handle is None
    assert result.failure_message == "iflow exited with code 1: Error: Request failed with status code 401"


# --- claude --------------------------------------------------------------------------------------

INIT = {"type": "system", "subtype": "init", "session_id": "cl-1", "model": "m", "tools": ["Bash"]}


def assistant(*blocks: dict) -> dict:
    return {"type": "assistant", "message": {"role": "assistant", "content": list(blocks)}, "session_id": "cl-1"}


def result_event(text: str, *, is_error: bool = False, subtype: str = "success") -> dict:
    return {"subtype": subtype, "is_error": is_error, "result": text, "session_id": "cl-1", "type": "result"}


def test_claude_stream_json_result_and_session() -> None:
    stdout = jsonl(
        INIT,
        assistant({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cat f"}}),
        {
            "type": "user",
            "message": {
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": '{"__SKILL_DONE__": true}'}]
            },
        },
        assistant({"type": "text", "text": "Which format do you want?"}),
        result_event("Which format do you want?"),
    )
    result = get_adapter("claude").parse(stdout, "", None, "interactive")
    assert result.session_handle == "cl-1"
    assert result.assistant_text == "Which format do you want?"
    assert result.outcome == "ask_user" and result.done_marker_found is False


def test_claude_result_error_is_an_engine_error() -> None:
    stdout = jsonl(INIT, result_event("API Error: 400 bad request", is_error=True))
    result = get_adapter("claude").parse(stdout, "", None, "auto")
    assert result.outcome == "error" and result.failure_message == "API Error: 400 bad request"


def test_claude_error_subtype_without_text() -> None:
    stdout = jsonl(INIT, {"type": "result", "subtype": "error_max_turns", "is_error": True, "session_id": "cl-1"})
    result = get_adapter("claude").parse(stdout, "", 0, "auto")
    assert result.outcome == "error" and "error_max_turns" in result.failure_message


def test_claude_without_result_event_falls_back_to_last_assistant_text_but_fails() -> None:
    stdout = jsonl(INIT, assistant({"type": "text", "text": "partial"}))
    result = get_adapter("claude").parse(stdout, "", 0, "interactive")
    assert result.outcome == "error" and result.assistant_text == "partial"


# --- qwen (Claude Code's stream-json shapes, Qwen Code's tool names) ------------------------------


def qwen_assistant(*blocks: dict, usage: dict | None = None) -> dict:
    message = {"role": "assistant", "content": list(blocks), "usage": usage or {"input_tokens": 0, "output_tokens": 0}}
    return {"type": "assistant", "message": message, "session_id": "qw-1", "parent_tool_use_id": None}


def qwen_tool_result(tool_id: str, content: str, is_error: bool = False) -> dict:
    block = {"type": "tool_result", "tool_use_id": tool_id, "is_error": is_error, "content": content}
    return {"type": "user", "message": {"role": "user", "content": [block]}, "session_id": "qw-1"}


def test_qwen_activity_plan_file_change_and_failed_tool() -> None:
    """R-AC1: todo_write is a plan, write_file/edit are file changes once they succeed, a failed
    tool is reported failed, and text followed by a tool call was an intermediate message."""
    todos = [
        {"id": "1", "content": "read", "status": "completed"},
        {"id": "2", "content": "write", "status": "pending"},
    ]
    events = [
        {"type": "system", "subtype": "init", "session_id": "qw-1"},
        qwen_assistant({"type": "tool_use", "id": "p", "name": "todo_write", "input": {"todos": todos}}),
        qwen_tool_result("p", "ok"),
        qwen_assistant({"type": "text", "text": "Writing it now."}),
        qwen_assistant({"type": "tool_use", "id": "w", "name": "write_file", "input": {"file_path": "/r/a.md"}}),
        qwen_tool_result("w", "Successfully created /r/a.md"),
        qwen_assistant({"type": "tool_use", "id": "e", "name": "edit", "input": {"file_path": "/r/b.md"}}),
        qwen_tool_result("e", "old_string not found", is_error=True),
        qwen_assistant({"type": "text", "text": "Done."}),
        {"type": "result", "subtype": "success", "is_error": False, "result": "Done.", "session_id": "qw-1"},
    ]
    parser = get_adapter("qwen").activity_parser()
    items = [item for event in events for item in parser.feed(json.dumps(event))]
    assert items[0] == {"type": "plan", "items": [{"text": "read", "done": True}, {"text": "write", "done": False}]}
    assert [(i["type"], i.get("phase"), i.get("status")) for i in items[1:]] == [
        ("message", None, None),  # the todo_write call's own result adds nothing to the plan
        ("tool", "started", None),
        ("tool", "finished", "ok"),
        ("file_change", None, None),
        ("tool", "started", None),
        ("tool", "finished", "failed"),
    ]
    assert items[1]["text"] == "Writing it now." and items[4]["paths"] == ["/r/a.md"]
    assert items[5]["command"] == "/r/b.md" and items[6]["output"] == "old_string not found"


def test_qwen_result_error_names_the_api_error_and_usage_sums_the_calls() -> None:
    events = [
        {"type": "system", "subtype": "init", "session_id": "qw-1"},
        qwen_assistant({"type": "thinking", "thinking": "hm"}),
        qwen_assistant(
            {"type": "tool_use", "id": "t", "name": "run_shell_command", "input": {"command": "ls"}},
            usage={"input_tokens": 100, "output_tokens": 7, "cache_read_input_tokens": 60},
        ),
        qwen_tool_result("t", "a.md"),
        qwen_assistant(
            {"type": "text", "text": "[API Error: 429 rate limited]"},
            usage={"input_tokens": 120, "output_tokens": 3, "cache_read_input_tokens": 100},
        ),
        {
            "type": "result",
            "subtype": "error_during_execution",
            "is_error": True,
            "session_id": "qw-1",
            "usage": {"input_tokens": 999, "output_tokens": 999},  # the whole session's: not this turn's
            "error": {"message": "[API Error: 429 rate limited]"},
        },
    ]
    result = get_adapter("qwen").parse(jsonl(*events), "", 1, "auto")
    assert result.outcome == "error" and result.failure_reason == FAILURE_ENGINE
    assert result.failure_message == "[API Error: 429 rate limited]" and result.session_handle == "qw-1"
    assert result.usage == {
        "input_tokens": 220,
        "cached_input_tokens": 160,
        "output_tokens": 10,
        "reasoning_tokens": None,
        "cost_usd": None,
    }


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_every_adapter_fills_stdout_stderr_and_exit_code(engine: str) -> None:
    result = get_adapter(engine).parse("out", "err", 3, "auto")
    assert (result.stdout, result.stderr, result.exit_code, result.outcome) == ("out", "err", 3, "error")


def test_codex_activity_items() -> None:
    """R-AC1: an intermediate agent message is released by what follows; the last one is the answer."""
    events = [
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "m1", "type": "agent_message", "text": "Looking first."}},
        {
            "type": "item.started",
            "item": {"id": "p", "type": "todo_list", "items": [{"text": "a", "completed": False}]},
        },
        {"type": "item.completed", "item": {"id": "f", "type": "file_change", "changes": [{"path": "/r/x.md"}]}},
        {
            "type": "item.started",
            "item": {"id": "t", "type": "mcp_tool_call", "server": "s", "tool": "q", "arguments": {}},
        },
        {
            "type": "item.completed",
            "item": {
                "id": "t",
                "type": "mcp_tool_call",
                "server": "s",
                "tool": "q",
                "status": "failed",
                "error": {"message": "no"},
            },
        },
        {"type": "item.completed", "item": {"id": "m2", "type": "agent_message", "text": "All done."}},
        {"type": "turn.completed", "usage": {}},
    ]
    parser = get_adapter("codex").activity_parser()
    items = [item for event in events for item in parser.feed(json.dumps(event))]
    assert items[0] == {"type": "message", "text": "Looking first."}
    assert items[1] == {"type": "plan", "items": [{"text": "a", "done": False}]}
    assert items[2] == {"type": "file_change", "paths": ["/r/x.md"]}
    assert (items[3]["phase"], items[3]["name"]) == ("started", "s.q")
    assert items[4]["status"] == "failed" and '"no"' in items[4]["output"]
    assert len(items) == 5  # "All done." is the final answer


# --- opencode family (`run --format json`; shapes as the pinned CLIs print them) -------------------

OPENCODE_FAMILY = ["opencode", "kilo"]
SESSION = "ses_main"


def oc(kind: str, session: str = SESSION, **part) -> dict:
    return {"type": kind, "timestamp": 1, "sessionID": session, "part": part}


def oc_tool(call: str, tool: str, tool_input: dict, status: str = "completed", **state) -> dict:
    times = {"start": 1000, "end": 1250}
    return oc(
        "tool_use",
        type="tool",
        tool=tool,
        callID=call,
        state={"status": status, "input": tool_input, "time": times, **state},
    )


def oc_step(
    reason: str, input_tokens: int = 10, output: int = 5, reasoning: int = 0, cache_read: int = 0, cost=0
) -> dict:
    tokens = {
        "input": input_tokens,
        "output": output,
        "reasoning": reasoning,
        "cache": {"read": cache_read, "write": 0},
    }
    return oc("step_finish", type="step-finish", reason=reason, tokens=tokens, cost=cost)


@pytest.mark.parametrize("engine", OPENCODE_FAMILY)
def test_opencode_final_message_is_the_text_after_the_last_tool(engine: str) -> None:
    stdout = jsonl(
        {"type": "skillrunner_tool_start", "sessionID": SESSION, "part": {"callID": "c1", "tool": "bash"}},
        oc("step_start", type="step-start"),
        oc("text", type="text", text="Let me look first."),
        oc_tool("c1", "bash", {"command": "cat notes.md"}, output='{"__SKILL_DONE__": true}', metadata={"exit": 0}),
        oc_step("tool-calls", 20, 8, 3, cache_read=4),
        oc("step_start", type="step-start"),
        oc("text", type="text", text='```json\n{"x": 1, "__SKILL_DONE__": true}\n```'),
        oc_step("stop", 30, 6),
    )
    result = get_adapter(engine).parse(stdout, "", 0, "interactive")
    assert result.session_handle == SESSION
    assert result.outcome == "final" and result.final_data == {"x": 1} and result.done_marker_found
    # Input with its cache reads, output with its reasoning, as the provider counted them;
    # the CLI's cost of 0 is its model config knowing no price: unreported.
    assert result.usage == {
        "input_tokens": 54,
        "cached_input_tokens": 4,
        "output_tokens": 17,
        "reasoning_tokens": 3,
        "cost_usd": None,
    }


@pytest.mark.parametrize("engine", OPENCODE_FAMILY)
def test_opencode_marker_only_in_tool_output_is_not_evidence(engine: str) -> None:
    stdout = jsonl(
        oc_tool("c1", "read", {"filePath": "/r/a.json"}, output='{"__SKILL_DONE__": true}'),
        oc_step("tool-calls"),
        oc("text", type="text", text="Which colour do you prefer?"),
        oc_step("stop", cost=0.0125),
    )
    result = get_adapter(engine).parse(stdout, "", 0, "interactive")
    assert result.outcome == "ask_user" and result.done_marker_found is False
    assert result.assistant_text == "Which colour do you prefer?"
    assert result.usage["cost_usd"] == pytest.approx(0.0125)


@pytest.mark.parametrize("engine", OPENCODE_FAMILY)
def test_opencode_error_event_is_an_engine_error(engine: str) -> None:
    error = {"name": "APIError", "data": {"message": "scripted HTTP 400 at step 0", "statusCode": 400}}
    stdout = jsonl({"type": "error", "timestamp": 1, "sessionID": SESSION, "error": error})
    result = get_adapter(engine).parse(stdout, "", 1, "interactive")
    assert result.outcome == "error" and result.failure_reason == FAILURE_ENGINE
    assert result.failure_message == "scripted HTTP 400 at step 0"
    assert result.session_handle == SESSION


@pytest.mark.parametrize("engine", OPENCODE_FAMILY)
def test_opencode_without_a_finished_step_fails(engine: str) -> None:
    """A resumed session run from another directory prints nothing and exits 0."""
    result = get_adapter(engine).parse("", "Session not found\n", 0, "auto")
    assert result.outcome == "error"
    assert result.failure_message == f"{engine} printed no step_finish event: Session not found"


@pytest.mark.parametrize("engine", OPENCODE_FAMILY)
def test_opencode_activity_tools_plans_files_and_subagents(engine: str) -> None:
    """R-AC1: a tool starts with the plugin's line and ends with tool_use; a subagent's tools (its
    own session) are left out; a todo list is a plan; a written file is a file change."""
    start = lambda call, tool, tool_input, session=SESSION: {  # noqa: E731
        "type": "skillrunner_tool_start",
        "sessionID": session,
        "part": {"callID": call, "tool": tool, "input": tool_input},
    }
    todos = [{"content": "draft", "status": "completed"}, {"content": "polish", "status": "pending"}]
    events = [
        start("t1", "bash", {"command": "false", "description": "fails"}),
        oc("step_start", type="step-start"),
        oc("reasoning", type="reasoning", text="Trying the command."),
        oc_tool("t1", "bash", {"command": "false"}, output="", metadata={"exit": 1}),
        oc("text", type="text", text="That failed; writing instead."),
        start("t2", "task", {"description": "look around"}),
        start("s1", "bash", {"command": "ls"}, session="ses_child"),
        oc_tool("t2", "task", {"description": "look around"}, output="nothing there"),
        start("t3", "todowrite", {"todos": todos}),
        oc_tool("t3", "todowrite", {"todos": todos}),
        start("t4", "write", {"filePath": "/r/artifacts/a.md", "content": "x"}),
        oc_tool("t4", "write", {"filePath": "/r/artifacts/a.md", "content": "x"}, output="Wrote file"),
        oc_tool("t5", "edit", {"filePath": "/r/b.md"}, status="error", error="oldString not found"),
        oc("text", type="text", text="Done."),
        oc_step("stop"),
    ]
    parser = get_adapter(engine).activity_parser()
    items = [item for event in events for item in parser.feed(json.dumps(event))]
    assert [(i["type"], i.get("phase"), i.get("name")) for i in items] == [
        ("tool", "started", "bash"),
        ("reasoning", None, None),
        ("tool", "finished", "bash"),
        ("message", None, None),
        ("tool", "started", "task"),
        ("tool", "finished", "task"),
        ("plan", None, None),
        ("tool", "started", "write"),
        ("tool", "finished", "write"),
        ("file_change", None, None),
        ("tool", "finished", "edit"),
    ]
    failed = items[2]
    assert (failed["status"], failed["exit_code"], failed["duration_ms"], failed["command"]) == (
        "failed",
        1,
        250,
        "false",
    )
    assert items[3]["text"] == "That failed; writing instead."
    assert items[6]["items"] == [{"text": "draft", "done": True}, {"text": "polish", "done": False}]
    assert items[9]["paths"] == ["/r/artifacts/a.md"]
    assert (items[10]["status"], items[10]["output"], items[10]["command"]) == (
        "failed",
        "oldString not found",
        "/r/b.md",
    )
