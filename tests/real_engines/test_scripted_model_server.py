"""Fast checks of the scripted model server itself (plain HTTP, no CLI involved)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.support.scripted_model_server import (
    KIND_SIDE,
    KIND_TURN,
    KIND_UNKNOWN,
    ScriptedModelServer,
    conversation_from_anthropic,
    conversation_from_chat,
    conversation_from_gemini,
    conversation_from_responses,
    resolve_step,
)


def post(url: str, body: dict, timeout: float = 10) -> tuple[int, str, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers.get("content-type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("content-type", ""), exc.read().decode()


def sse_data(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def responses_body(*items: dict) -> dict:
    env = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/x</cwd>\n</environment_context>"}],
    }
    return {"model": "gpt-5.5", "stream": True, "input": [env, *items]}


def user_item(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_responses_text_then_tool_then_past_end():
    script = [{"shell": "echo hi > out.txt"}, {"text": "saw: {tool_output} n={step}"}]
    with ScriptedModelServer(script) as srv:
        status, ctype, text = post(srv.url + "/v1/responses", responses_body(user_item("go")))
        assert status == 200 and ctype.startswith("text/event-stream")
        events = sse_data(text)
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "response.completed"
        done = [e for e in events if e["type"] == "response.output_item.done"][0]["item"]
        assert done["type"] == "function_call" and done["name"] == "exec_command"
        assert json.loads(done["arguments"]) == {"cmd": "echo hi > out.txt"}

        history = responses_body(
            user_item("go"),
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "OUT"},
        )
        _, _, text = post(srv.url + "/v1/responses", history)
        done = [e for e in sse_data(text) if e["type"] == "response.output_item.done"][0]["item"]
        assert done["content"][0]["text"] == "saw: OUT n=1"

        rec = srv.requests[-1]
        assert rec.protocol == "openai-responses" and rec.kind == KIND_TURN
        assert rec.user_texts == ["go"] and rec.tool_results == ["OUT"] and rec.step_index == 1


def test_selector_matches_latest_user_text_and_turn_counting():
    script = {
        "match": [{"contains": "tool please", "steps": [{"shell": "true"}, {"text": "tool done"}], "count": "turn"}],
        "default": [{"text": "default turns={user_turns} last={user_text}"}],
    }
    conv = conversation_from_anthropic(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "<system-reminder>x</system-reminder>"},
                        {"type": "text", "text": "hello"},
                    ],
                },
                {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
                {"role": "user", "content": "now tool please"},
            ]
        }
    )
    assert conv.user_texts == ["hello", "now tool please"]
    assert conv.model_outputs == 1 and conv.outputs_since_user == 0
    n, step = resolve_step(script, conv)
    assert (n, step) == (0, {"shell": "true"})

    conv = conversation_from_gemini(
        {
            "contents": [
                {"role": "user", "parts": [{"text": "<session_context>s</session_context>"}, {"text": "hey"}]},
            ]
        }
    )
    assert resolve_step(script, conv) == (0, {"text": "default turns=1 last=hey"})


def test_conversation_counts_responses_items():
    conv = conversation_from_responses(
        responses_body(
            user_item("one"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
            user_item("two"),
        )
    )
    assert conv.user_texts == ["one", "two"] and conv.model_outputs == 1


def chat_body(*messages: dict, stream: bool = True, tools: tuple[str, ...] = ("read_file", "bash")) -> dict:
    system = {"role": "system", "content": "You are a CLI."}
    required = {"type": "object", "properties": {"command": {"type": "string"}, "background": {"type": "boolean"}}}
    required["required"] = ["command", "background"]
    offered = [{"type": "function", "function": {"name": name, "parameters": required}} for name in tools]
    return {"model": "m", "stream": stream, "messages": [system, *messages], "tools": offered}


def test_chat_completions_text_stream_with_reasoning_and_usage():
    with ScriptedModelServer([{"text": "hello chat", "reasoning": "thinking it over"}]) as srv:
        user = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}]}
        user["content"].append({"type": "text", "text": "hi"})
        status, ctype, text = post(srv.url + "/v1/chat/completions", chat_body(user))
        assert status == 200 and ctype.startswith("text/event-stream")
        assert text.rstrip().endswith("data: [DONE]")
        chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        assert "".join(d.get("content") or "" for d in deltas) == "hello chat"
        assert [d["reasoning_content"] for d in deltas if "reasoning_content" in d] == ["thinking it over"]
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
        usage = chunks[-1]["usage"]
        assert chunks[-1]["choices"] == [] and usage["completion_tokens_details"]["reasoning_tokens"] == 4
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert srv.requests[-1].protocol == "openai-chat" and srv.requests[-1].user_texts == ["hi"]


def test_chat_completions_shell_step_calls_the_offered_shell_tool():
    script = [{"shell": "echo hi > out.txt"}, {"text": "saw: {tool_output} n={step}"}]
    with ScriptedModelServer(script) as srv:
        _, _, text = post(srv.url + "/v1/chat/completions", chat_body({"role": "user", "content": "go"}))
        chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        calls = [
            c["choices"][0]["delta"]["tool_calls"][0]
            for c in chunks
            if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
        ]
        assert calls[0]["function"]["name"] == "bash" and calls[0]["id"].startswith("call_")
        arguments = json.loads("".join(call["function"]["arguments"] for call in calls))
        # `background` is required by the tool's schema, so it gets a value too.
        assert arguments == {"command": "echo hi > out.txt", "description": "scripted command", "background": False}
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"

        call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        history = chat_body(
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "OUT"},
        )
        _, _, text = post(srv.url + "/v1/chat/completions", {**history, "stream": False})
        answer = json.loads(text)
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"] == "saw: OUT n=1"
        assert srv.requests[-1].tool_results == ["OUT"] and srv.requests[-1].step_index == 1


def test_chat_completions_calls_run_shell_command_before_bash():
    with ScriptedModelServer([{"shell": "true"}]) as srv:
        body = chat_body({"role": "user", "content": "go"}, stream=False, tools=("bash", "run_shell_command"))
        _, _, text = post(srv.url + "/v1/chat/completions", body)
        call = json.loads(text)["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "run_shell_command"


def test_conversation_counts_chat_messages():
    conv = conversation_from_chat(
        chat_body(
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": [{"type": "text", "text": "two"}]},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "done"}]},
        )
    )
    assert conv.user_texts == ["one", "two"] and conv.model_outputs == 2 and conv.outputs_since_user == 1
    assert conv.tool_results == ["done"]


def test_kilos_environment_details_are_not_the_users_text():
    details = (
        "\n<environment_details>\nMessage time: 2026-11-28T19:10:37Z\nWorking directory: /r\n</environment_details>"
    )
    conv = conversation_from_chat(
        chat_body({"role": "user", "content": [{"type": "text", "text": "plan it" + details}]})
    )
    assert conv.user_texts == ["plan it"]


def test_gemini_stream_side_calls_and_count_tokens():
    with ScriptedModelServer([{"text": "hello gemini"}]) as srv:
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        status, ctype, text = post(srv.url + "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", body)
        assert status == 200 and ctype.startswith("text/event-stream")
        chunks = sse_data(text)
        assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "hello gemini"
        assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"

        schema = {
            "type": "OBJECT",
            "properties": {
                "next_speaker": {"type": "STRING", "enum": ["model", "user"]},
                "complexity_score": {"type": "INTEGER", "minimum": 1, "maximum": 100},
                "reasoning": {"type": "STRING"},
            },
        }
        side = {
            "contents": body["contents"],
            "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema},
        }
        status, _, text = post(srv.url + "/v1beta/models/gemini-3.5-flash-lite:generateContent", side)
        answer = json.loads(json.loads(text)["candidates"][0]["content"]["parts"][0]["text"])
        assert answer["next_speaker"] == "user" and answer["complexity_score"] >= 1

        status, _, text = post(srv.url + "/v1beta/models/gemini-2.5-flash:countTokens", body)
        assert status == 200 and json.loads(text)["totalTokens"] >= 1
        assert [r.kind for r in srv.requests] == [KIND_TURN, KIND_SIDE, KIND_SIDE]


def test_anthropic_tool_use_stream():
    with ScriptedModelServer([{"shell": "ls", "description": "list"}]) as srv:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
        _, _, text = post(srv.url + "/v1/messages?beta=true", body)
        events = sse_data(text)
        assert [e["type"] for e in events] == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        assert events[1]["content_block"]["name"] == "Bash"
        assert json.loads(events[2]["delta"]["partial_json"]) == {"command": "ls", "description": "list"}
        assert events[4]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    "path,check",
    [
        ("/v1/responses", lambda d: d["error"]["type"] == "server_error"),
        ("/v1/chat/completions", lambda d: d["error"]["type"] == "server_error"),
        ("/v1beta/models/g:streamGenerateContent?alt=sse", lambda d: d["error"]["status"] == "INTERNAL"),
        ("/v1/messages", lambda d: d["type"] == "error" and d["error"]["type"] == "api_error"),
    ],
)
def test_http_error_bodies(path, check):
    with ScriptedModelServer([{"http_error": 500}]) as srv:
        status, ctype, text = post(srv.url + path, {"messages": [], "contents": [], "input": []})
        assert status == 500 and ctype == "application/json" and check(json.loads(text))


def test_delay_and_unknown_route_and_bad_script():
    with ScriptedModelServer([{"delay": 0.3, "text": "late"}]) as srv:
        started = time.monotonic()
        post(srv.url + "/v1/messages", {"messages": [{"role": "user", "content": "x"}]})
        assert time.monotonic() - started >= 0.3
        status, _, _ = post(srv.url + "/v1/nothing", {})
        assert status == 404 and srv.requests[-1].kind == KIND_UNKNOWN
        with pytest.raises(ValueError):
            srv.set_script([{"bogus": 1}])


def test_stop_does_not_wait_for_a_delayed_answer():
    srv = ScriptedModelServer([{"delay": 30, "text": "never"}]).start()

    def client() -> None:
        try:
            post(srv.url + "/v1/messages", {"messages": []}, timeout=40)
        except OSError:
            pass  # the server drops the connection when it stops: expected

    t = threading.Thread(target=client, daemon=True)
    t.start()
    srv.wait_for_requests(1)
    started = time.monotonic()
    srv.stop()
    assert time.monotonic() - started < 5
