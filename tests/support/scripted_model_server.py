"""A scripted, stateless fake LLM server for running the real agent CLIs offline.

It speaks just enough of four vendor wire protocols, all streamed as SSE:

* OpenAI Responses API -- ``POST /v1/responses`` (Codex with a custom ``model_providers`` entry,
  ``wire_api = "responses"``).
* OpenAI Chat Completions -- ``POST /v1/chat/completions`` (Qwen Code, and the CLIs built on
  OpenAI-compatible providers): ``chat.completion.chunk`` deltas, one tool call per shell step,
  a usage chunk and ``data: [DONE]`` (one ``chat.completion`` document when the request does not
  ask for a stream).
* Gemini API -- ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` for the turns, plus the
  non-streamed side calls ``:generateContent`` (JSON-schema answers such as ``next_speaker`` or the
  model router's ``complexity_score``) and ``:countTokens``.
* Anthropic Messages -- ``POST /v1/messages`` (Claude Code sends ``?beta=true``) and
  ``/v1/messages/count_tokens``.

Scripts
-------
A script is a list of steps. Each step is one dict:

* ``{"text": "..."}`` -- the model answers with final assistant text.
* ``{"shell": "<command>"}`` -- the model calls the CLI's shell tool (Codex ``exec_command`` with
  ``{"cmd"}``, Gemini ``run_shell_command`` and Claude ``Bash`` with ``{"command", "description"}``;
  over Chat Completions the first of ``CHAT_SHELL_TOOLS`` the request offers, with
  ``{"command", "description"}`` plus a small value for any other parameter it requires).
  An optional ``"description"`` overrides the default one.
* ``{"http_error": 500}`` -- answer with that HTTP status and a vendor-shaped JSON error body
  (optional ``"message"``).
* Any step may carry ``"reasoning": "<summary>"`` -- the answer starts with a reasoning block (a
  Responses ``reasoning`` item with a summary, a Chat Completions ``reasoning_content`` delta, a
  Gemini ``thought`` part, an Anthropic ``thinking`` block), whose size is reported as reasoning
  tokens.
* Any step may carry ``"delay": <seconds>`` -- sleep before answering (hard-timeout / cancel tests).
  A step holding only ``delay`` answers with an empty-ish text after the sleep.

The server is **stateless**: the answer to a request is step ``N`` where ``N`` is the number of model
outputs already present in the request's history (Responses ``function_call`` and assistant
``message`` items, Chat Completions and Anthropic ``assistant`` messages, Gemini ``model``
contents). Every CLI re-sends
the whole conversation on each call, resume included, so this works across processes. Past the end
of the script the last step is repeated if it is a text step; otherwise the server answers with the
text ``[scripted model: script exhausted at step N]`` so the CLI ends its turn.

A script may also be a *selector* so that one server can serve several scenarios::

    {"match": [{"contains": "make a file", "steps": [...]}, ...],
     "default": [...]}

Entries are tried in order against the most recent real user text (wrapper blocks such as Codex's
``<environment_context>``, Gemini's ``<session_context>``, Claude's ``<system-reminder>`` and Kilo's
``<environment_details>`` are removed first); the first entry whose ``contains`` substring occurs wins, else ``default``. A selector
(or a match entry) may set ``"count": "turn"`` so that ``N`` only counts the model outputs since the
latest real user message, which makes per-turn scripts easy for multi-turn scenarios (the default is
``"count": "conversation"``).

Text steps (and shell commands) may use these placeholders, substituted literally:
``{user_text}`` (latest real user text), ``{user_turns}`` (number of real user messages),
``{tool_output}`` (the latest tool result the CLI sent back, or empty) and ``{step}`` (``N``).

Usage::

    with ScriptedModelServer([{"shell": "echo hi > out.txt"}, {"text": "done"}]) as srv:
        srv.url        # http://127.0.0.1:<free port>
        srv.requests   # snapshot list of RecordedRequest, recorded thread-safely
        srv.set_script([...])

or, for manual demos: ``python -m tests.support.scripted_model_server --port 18001 --script s.json``.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

PROTO_OPENAI = "openai-responses"
PROTO_CHAT = "openai-chat"
PROTO_GEMINI = "gemini"
PROTO_ANTHROPIC = "anthropic"

KIND_TURN = "turn"  # a scripted conversation step
KIND_SIDE = "side"  # an unscripted side call (Gemini generateContent, token counting)
KIND_UNKNOWN = "unknown"  # an endpoint this fake does not serve (answered 404)

DEFAULT_SCRIPT: list[dict[str, Any]] = [{"text": "FAKE_REPLY user_turns={user_turns} last={user_text}"}]

# Wrapper blocks the CLIs inject into "user" messages; they are not what the user typed.
_WRAPPER_TAGS = (
    "environment_context",
    "session_context",
    "system-reminder",
    "user_instructions",
    "turn_aborted",
    "environment_details",  # Kilo's, after the user's text
)
_WRAPPER_RE = re.compile(r"<({})\b[^>]*>.*?</\1>".format("|".join(re.escape(t) for t in _WRAPPER_TAGS)), re.DOTALL)
# Codex sends project docs as a user message starting like this.
_AGENTS_MD_PREFIX = "# AGENTS.md instructions"

_HEADERS_KEPT = {
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "user-agent",
    "accept",
    "content-type",
    "content-encoding",
    "originator",
    "session-id",
    "thread-id",
    "x-client-request-id",
    "x-codex-turn-metadata",
    "anthropic-version",
    "anthropic-beta",
    "x-claude-code-session-id",
}


# --------------------------------------------------------------------------------------------
# Conversation extraction (one function per protocol)
# --------------------------------------------------------------------------------------------


@dataclass
class Conversation:
    """What the fake needs to know about a request's history, protocol-neutral."""

    user_texts: list[str] = field(default_factory=list)  # real user messages, oldest first
    model_outputs: int = 0  # model outputs already in the history
    outputs_since_user: int = 0  # model outputs after the latest real user message
    tool_results: list[str] = field(default_factory=list)  # tool outputs sent back, oldest first


def clean_user_text(text: str) -> str:
    """Drop CLI-injected wrapper blocks from one user text part; '' if nothing real is left."""
    stripped = _WRAPPER_RE.sub("", text).strip()
    if stripped.startswith(_AGENTS_MD_PREFIX):
        return ""
    return stripped


def _join_texts(parts: list[str]) -> str:
    return "\n".join(p for p in (clean_user_text(t) for t in parts) if p)


def _note_user(conv: Conversation, text: str) -> None:
    if text:
        conv.user_texts.append(text)
        conv.outputs_since_user = 0


def _note_model_output(conv: Conversation) -> None:
    conv.model_outputs += 1
    conv.outputs_since_user += 1


def _content_text(content: Any) -> str:
    """Flatten a tool-result payload (string, list of blocks, dict) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_content_text(c) for c in content)
    if isinstance(content, dict):
        if "text" in content and isinstance(content["text"], str):
            return content["text"]
        if "output" in content:
            return _content_text(content["output"])
        return json.dumps(content, sort_keys=True)
    return str(content)


def conversation_from_responses(body: dict) -> Conversation:
    conv = Conversation()
    items = body.get("input")
    if isinstance(items, str):
        _note_user(conv, clean_user_text(items))
        return conv
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role == "user":
                _note_user(conv, _join_texts(_texts_of(item.get("content"), ("input_text", "text"))))
            elif role == "assistant":
                _note_model_output(conv)
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            _note_model_output(conv)
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            conv.tool_results.append(_content_text(item.get("output")))
    return conv


def conversation_from_chat(body: dict) -> Conversation:
    """Chat Completions ``messages``: user text, assistant messages (with or without tool calls),
    and ``tool`` messages carrying tool results. System messages are not the user's."""
    conv = Conversation()
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            _note_model_output(conv)
        elif role == "tool":
            conv.tool_results.append(_content_text(content))
        elif role == "user":
            _note_user(conv, _join_texts(_texts_of(content, ("text",))))
    return conv


def _texts_of(content: Any, kinds: tuple[str, ...]) -> list[str]:
    """A user message's texts: the content itself when a string, else its blocks of these kinds."""
    if isinstance(content, str):
        return [content]
    return [c.get("text", "") for c in content or [] if isinstance(c, dict) and c.get("type") in kinds]


def conversation_from_gemini(body: dict) -> Conversation:
    conv = Conversation()
    for content in body.get("contents") or []:
        if not isinstance(content, dict):
            continue
        role = content.get("role", "user")
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if role == "model":
            _note_model_output(conv)
            continue
        texts = []
        for part in parts:
            if "functionResponse" in part:
                response = (part["functionResponse"] or {}).get("response")
                conv.tool_results.append(_content_text(response))
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                texts.append(part["text"])
        _note_user(conv, _join_texts(texts))
    return conv


def conversation_from_anthropic(body: dict) -> Conversation:
    conv = Conversation()
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            _note_model_output(conv)
            continue
        if role != "user":
            continue
        if isinstance(content, str):
            _note_user(conv, _join_texts([content]))
            continue
        texts = []
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                conv.tool_results.append(_content_text(block.get("content")))
            elif block.get("type") == "text":
                texts.append(block.get("text", ""))
        _note_user(conv, _join_texts(texts))
    return conv


# --------------------------------------------------------------------------------------------
# Script resolution
# --------------------------------------------------------------------------------------------


def validate_script(script: Any) -> None:
    """Raise ValueError early for a malformed script (cheaper than a confusing CLI failure)."""

    def check_steps(steps: Any, where: str) -> None:
        if not isinstance(steps, list) or not steps:
            raise ValueError(f"{where}: a script needs a non-empty list of steps")
        for i, step in enumerate(steps):
            if not isinstance(step, dict):
                raise ValueError(f"{where}[{i}]: a step must be a dict")
            actions = [k for k in ("text", "shell", "http_error") if k in step]
            if len(actions) > 1:
                raise ValueError(f"{where}[{i}]: one of text/shell/http_error, not {actions}")
            if not actions and "delay" not in step:
                raise ValueError(f"{where}[{i}]: unknown step {step!r}")

    if isinstance(script, list):
        check_steps(script, "script")
    elif isinstance(script, dict):
        for i, entry in enumerate(script.get("match") or []):
            if not isinstance(entry, dict) or not isinstance(entry.get("contains"), str):
                raise ValueError(f"match[{i}]: needs a 'contains' string")
            check_steps(entry.get("steps"), f"match[{i}].steps")
        check_steps(script.get("default", DEFAULT_SCRIPT), "default")
    else:
        raise ValueError("a script is a list of steps or a {'match': [...], 'default': [...]} dict")


def resolve_step(script: Any, conv: Conversation) -> tuple[int, dict[str, Any]]:
    """Pick the step answering this request; returns (N, step with placeholders substituted)."""
    steps: list[dict[str, Any]]
    count = "conversation"
    if isinstance(script, dict):
        latest = conv.user_texts[-1] if conv.user_texts else ""
        count = script.get("count", count)
        steps = script.get("default", DEFAULT_SCRIPT)
        for entry in script.get("match") or []:
            if entry["contains"] in latest:
                steps = entry["steps"]
                count = entry.get("count", count)
                break
    else:
        steps = script
    n = conv.outputs_since_user if count == "turn" else conv.model_outputs
    if n < len(steps):
        step = steps[n]
    elif "text" in steps[-1]:
        step = steps[-1]
    else:
        step = {"text": f"[scripted model: script exhausted at step {n}]"}
    return n, _substitute(step, conv, n)


def _substitute(step: dict[str, Any], conv: Conversation, n: int) -> dict[str, Any]:
    values = {
        "{user_text}": conv.user_texts[-1] if conv.user_texts else "",
        "{user_turns}": str(len(conv.user_texts)),
        "{tool_output}": conv.tool_results[-1] if conv.tool_results else "",
        "{step}": str(n),
    }
    out = dict(step)
    for key in ("text", "shell"):
        if isinstance(out.get(key), str):
            text = out[key]
            for placeholder, value in values.items():
                text = text.replace(placeholder, value)
            out[key] = text
    return out


# --------------------------------------------------------------------------------------------
# Recorded requests
# --------------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    protocol: str  # PROTO_* or "unknown"
    kind: str  # KIND_TURN, KIND_SIDE or KIND_UNKNOWN
    method: str
    path: str  # path including the query string
    model: str | None
    headers: dict[str, str]  # lower-cased, informative subset
    body: Any  # parsed JSON (or None)
    user_texts: list[str]
    tool_results: list[str]
    model_outputs: int
    step_index: int | None  # N, for KIND_TURN requests
    step: dict[str, Any] | None  # the step answered (placeholders substituted)
    status: int = 200
    time: float = field(default_factory=time.time)

    @property
    def latest_user_text(self) -> str:
        return self.user_texts[-1] if self.user_texts else ""

    @property
    def user_turns(self) -> int:
        return len(self.user_texts)


# --------------------------------------------------------------------------------------------
# Wire formats
# --------------------------------------------------------------------------------------------


def _sse(event: str | None, data: Any) -> bytes:
    payload = json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _split_text(text: str) -> list[str]:
    """Two deltas for anything longer than a few characters, like a real stream."""
    if len(text) < 8:
        return [text]
    mid = len(text) // 2
    return [text[:mid], text[mid:]]


def _usage_tokens(conv: Conversation, step: dict[str, Any]) -> tuple[int, int]:
    prompt = 10 + 5 * (len(conv.user_texts) + conv.model_outputs)
    output = max(1, len(step.get("text") or step.get("shell") or "") // 4)
    return prompt, output


def _reasoning_tokens(step: dict[str, Any]) -> int:
    return len(step.get("reasoning") or "") // 4


def responses_events(step: dict[str, Any], conv: Conversation, model: str) -> list[bytes]:
    rid = "resp_" + uuid.uuid4().hex[:24]
    seq = iter(range(1, 10_000))
    created = int(time.time())
    base = {
        "id": rid,
        "object": "response",
        "created_at": created,
        "model": model,
        "output": [],
        "usage": None,
    }
    prompt, output = _usage_tokens(conv, step)
    out: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        out.append(_sse(kind, {"type": kind, "sequence_number": next(seq), **data}))

    emit("response.created", response={**base, "status": "in_progress"})
    emit("response.in_progress", response={**base, "status": "in_progress"})
    done_items: list[dict[str, Any]] = []
    if step.get("reasoning"):
        summary = step["reasoning"]
        rs = {"type": "reasoning", "id": "rs_" + uuid.uuid4().hex[:20], "summary": []}
        emit("response.output_item.added", output_index=0, item=rs)
        loc_rs = {"item_id": rs["id"], "output_index": 0, "summary_index": 0}
        emit("response.reasoning_summary_part.added", **loc_rs, part={"type": "summary_text", "text": ""})
        emit("response.reasoning_summary_text.delta", **loc_rs, delta=summary)
        emit("response.reasoning_summary_text.done", **loc_rs, text=summary)
        emit("response.reasoning_summary_part.done", **loc_rs, part={"type": "summary_text", "text": summary})
        done_rs = {**rs, "summary": [{"type": "summary_text", "text": summary}]}
        emit("response.output_item.done", output_index=0, item=done_rs)
        done_items.append(done_rs)
    index = len(done_items)
    if "shell" in step:
        call_id = "call_" + uuid.uuid4().hex[:20]
        item_id = "fc_" + uuid.uuid4().hex[:20]
        args = json.dumps({"cmd": step["shell"]})
        item = {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": "exec_command",
            "arguments": "",
            "status": "in_progress",
        }
        emit("response.output_item.added", output_index=index, item=item)
        emit("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=args)
        emit("response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=args)
        done_item = {**item, "arguments": args, "status": "completed"}
    else:
        text = step.get("text", "")
        item_id = "msg_" + uuid.uuid4().hex[:20]
        item = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": []}
        loc = {"item_id": item_id, "output_index": index, "content_index": 0}
        emit("response.output_item.added", output_index=index, item=item)
        emit("response.content_part.added", **loc, part=part)
        for delta in _split_text(text):
            emit("response.output_text.delta", **loc, delta=delta)
        emit("response.output_text.done", **loc, text=text)
        emit("response.content_part.done", **loc, part={**part, "text": text})
        done_item = {**item, "status": "completed", "content": [{**part, "text": text}]}
    emit("response.output_item.done", output_index=index, item=done_item)
    reasoning = _reasoning_tokens(step)
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output + reasoning,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + output + reasoning,
    }
    emit(
        "response.completed",
        response={**base, "status": "completed", "output": [*done_items, done_item], "usage": usage},
    )
    return out


# Shell tools of the Chat Completions CLIs, by the names they offer them under (Qwen Code's
# run_shell_command, OpenCode's and Kilo's bash); the first one a request offers is called.
CHAT_SHELL_TOOLS = ("run_shell_command", "bash", "shell")


def _offered_tools(body: dict) -> dict[str, dict[str, Any]]:
    """The function tools a Chat Completions request offers: name -> JSON schema of its parameters."""
    offered = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            offered[function["name"]] = parameters if isinstance(parameters, dict) else {}
    return offered


def chat_shell_call(step: dict[str, Any], body: dict) -> tuple[str, dict[str, Any]]:
    """The tool call (name, arguments) that runs ``step["shell"]`` with the shell tool the request
    offers; other parameters the tool requires get a small valid value."""
    offered = _offered_tools(body)
    name = next((tool for tool in CHAT_SHELL_TOOLS if tool in offered), CHAT_SHELL_TOOLS[0])
    schema = offered.get(name, {})
    args: dict[str, Any] = {"command": step["shell"], "description": step.get("description", "scripted command")}
    properties = schema.get("properties") or {}
    for required in schema.get("required") or []:
        if required not in args:
            args[required] = value_for_schema(properties.get(required), required)
    return name, args


def _chat_usage(conv: Conversation, step: dict[str, Any]) -> dict[str, Any]:
    prompt, output = _usage_tokens(conv, step)
    reasoning = _reasoning_tokens(step)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output + reasoning,
        "total_tokens": prompt + output + reasoning,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def _chat_base(model: str, kind: str) -> dict[str, Any]:
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": kind, "created": int(time.time()), "model": model}


def chat_chunks(step: dict[str, Any], conv: Conversation, model: str, body: dict) -> list[bytes]:
    """A streamed ``chat.completion.chunk`` answer: optional ``reasoning_content`` deltas, then text
    deltas or one tool call, the finish reason, a usage chunk (``stream_options.include_usage``
    asks for it; sent always, as many servers do) and ``[DONE]``."""
    base = _chat_base(model, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    if step.get("reasoning"):
        out.append(chunk({"reasoning_content": step["reasoning"]}))
    if "shell" in step:
        name, args = chat_shell_call(step, body)
        call = {"index": 0, "id": "call_" + uuid.uuid4().hex[:20], "type": "function"}
        arguments = json.dumps(args)
        half = len(arguments) // 2  # arguments arrive in pieces, as from a real server
        out.append(chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": arguments[:half]}}]}))
        out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}))
        finish = "tool_calls"
    else:
        out += [chunk({"content": delta}) for delta in _split_text(step.get("text", ""))]
        finish = "stop"
    out.append(chunk({}, finish))
    out.append(_sse(None, {**base, "choices": [], "usage": _chat_usage(conv, step)}))
    out.append(b"data: [DONE]\n\n")
    return out


def chat_completion(step: dict[str, Any], conv: Conversation, model: str, body: dict) -> dict[str, Any]:
    """The same answer as one ``chat.completion`` document, for a request without ``stream: true``."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if step.get("reasoning"):
        message["reasoning_content"] = step["reasoning"]
    if "shell" in step:
        name, args = chat_shell_call(step, body)
        function = {"name": name, "arguments": json.dumps(args)}
        message["tool_calls"] = [{"id": "call_" + uuid.uuid4().hex[:20], "type": "function", "function": function}]
        finish = "tool_calls"
    else:
        message["content"] = step.get("text", "")
        finish = "stop"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {**_chat_base(model, "chat.completion"), "choices": [choice], "usage": _chat_usage(conv, step)}


def gemini_chunks(step: dict[str, Any], conv: Conversation, model: str) -> list[bytes]:
    prompt, output = _usage_tokens(conv, step)
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + _reasoning_tokens(step),
    }
    if step.get("reasoning"):
        usage["thoughtsTokenCount"] = _reasoning_tokens(step)
    response_id = uuid.uuid4().hex[:20]
    if "shell" in step:
        args = {"command": step["shell"], "description": step.get("description", "scripted command")}
        pieces = [[{"functionCall": {"name": "run_shell_command", "args": args}}]]
    else:
        pieces = [[{"text": t}] for t in _split_text(step.get("text", ""))]
    if step.get("reasoning"):
        pieces.insert(0, [{"text": step["reasoning"], "thought": True}])
    out = []
    for i, parts in enumerate(pieces):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate]}
        if i == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = usage
        chunk["modelVersion"] = model
        chunk["responseId"] = response_id
        out.append(_sse(None, chunk))
    return out


def anthropic_events(step: dict[str, Any], conv: Conversation, model: str) -> list[bytes]:
    prompt, output = _usage_tokens(conv, step)
    out: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        out.append(_sse(kind, {"type": kind, **data}))

    message = {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1},
    }
    emit("message_start", message=message)
    index = 0
    if step.get("reasoning"):
        emit("content_block_start", index=0, content_block={"type": "thinking", "thinking": "", "signature": ""})
        emit("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": step["reasoning"]})
        emit("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "scripted"})
        emit("content_block_stop", index=0)
        index = 1
    if "shell" in step:
        tool_input = {
            "command": step["shell"],
            "description": step.get("description", "scripted command"),
        }
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20], "name": "Bash", "input": {}}
        emit("content_block_start", index=index, content_block=block)
        emit(
            "content_block_delta",
            index=index,
            delta={"type": "input_json_delta", "partial_json": json.dumps(tool_input)},
        )
        stop_reason = "tool_use"
    else:
        emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
        for delta in _split_text(step.get("text", "")):
            emit("content_block_delta", index=index, delta={"type": "text_delta", "text": delta})
        stop_reason = "end_turn"
    emit("content_block_stop", index=index)
    emit(
        "message_delta",
        delta={"stop_reason": stop_reason, "stop_sequence": None},
        usage={"output_tokens": output},
    )
    emit("message_stop")
    return out


def error_body(protocol: str, status: int, message: str) -> dict[str, Any]:
    if protocol == PROTO_GEMINI:
        return {"error": {"code": status, "message": message, "status": _grpc_status(status)}}
    if protocol == PROTO_ANTHROPIC:
        kind = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _grpc_status(status: int) -> str:
    return {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
        503: "UNAVAILABLE",
    }.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")


def value_for_schema(schema: Any, name: str = "") -> Any:
    """A small value that satisfies a (Gemini-flavoured) JSON schema; used for side calls."""
    if not isinstance(schema, dict):
        return "scripted"
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "string")
    kind = str(kind or ("object" if "properties" in schema else "string")).lower()
    enum = schema.get("enum")
    if enum:
        if name == "next_speaker" and "user" in enum:
            return "user"
        return enum[0]
    if kind == "object":
        props = schema.get("properties") or {}
        return {key: value_for_schema(sub, key) for key, sub in props.items()}
    if kind == "array":
        count = int(schema.get("minItems") or 0)
        return [value_for_schema(schema.get("items"), name) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        high = schema.get("maximum")
        value = 50 if name.endswith("score") else 1
        if low is not None:
            value = max(value, low)
        if high is not None:
            value = min(value, high)
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if name == "next_speaker":
        return "user"
    return "scripted"


# --------------------------------------------------------------------------------------------
# HTTP server
# --------------------------------------------------------------------------------------------

_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha|)?/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")


class _Handler(BaseHTTPRequestHandler):
    server_version = "ScriptedModelServer/1.0"
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.owner.verbose:
            sys.stderr.write("[scripted-model] %s\n" % (format % args))

    # -- plumbing -----------------------------------------------------------------------------

    def _read_body(self) -> Any:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
            data = bytes(raw)
        else:
            data = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("content-encoding", "").lower() == "gzip":
            data = gzip.decompress(data)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return {"_raw": data.decode("utf-8", "replace")}

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_sse(self, chunks: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- routing ------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._unknown(None)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        try:
            body = self._read_body()
        except (ValueError, OSError) as exc:
            self._send_json(400, {"error": {"message": f"unreadable body: {exc}"}})
            return
        split = urlsplit(self.path)
        path = split.path
        try:
            if path == "/v1/responses":
                self._turn(PROTO_OPENAI, body, (body or {}).get("model", "unknown"))
            elif path == "/v1/chat/completions":
                self._turn(PROTO_CHAT, body, (body or {}).get("model", "unknown"))
            elif path == "/v1/messages":
                self._turn(PROTO_ANTHROPIC, body, (body or {}).get("model", "unknown"))
            elif path == "/v1/messages/count_tokens":
                self._side(PROTO_ANTHROPIC, body, None, {"input_tokens": _count_tokens(body)})
            elif match := _GEMINI_PATH.match(path):
                model, method = match["model"], match["method"]
                if method == "streamGenerateContent":
                    self._turn(PROTO_GEMINI, body, model)
                elif method == "generateContent":
                    self._side(PROTO_GEMINI, body, model, _gemini_side_answer(body, model))
                elif method == "countTokens":
                    self._side(PROTO_GEMINI, body, model, {"totalTokens": _count_tokens(body)})
                else:
                    self._unknown(body)
            else:
                self._unknown(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the CLI went away (killed mid-turn); nothing to answer

    def _record(self, **fields: Any) -> RecordedRequest:
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() in _HEADERS_KEPT}
        rec = RecordedRequest(method=self.command, path=self.path, headers=headers, **fields)
        self.server.owner._append(rec)
        return rec

    def _unknown(self, body: Any) -> None:
        self._record(
            protocol="unknown",
            kind=KIND_UNKNOWN,
            model=None,
            body=body,
            user_texts=[],
            tool_results=[],
            model_outputs=0,
            step_index=None,
            step=None,
            status=404,
        )
        self._send_json(404, {"error": {"message": f"scripted model server: no route {self.path}"}})

    def _side(self, protocol: str, body: Any, model: str | None, answer: Any) -> None:
        conv = _conversation(protocol, body or {})
        self._record(
            protocol=protocol,
            kind=KIND_SIDE,
            model=model,
            body=body,
            user_texts=conv.user_texts,
            tool_results=conv.tool_results,
            model_outputs=conv.model_outputs,
            step_index=None,
            step=None,
        )
        self._send_json(200, answer)

    def _turn(self, protocol: str, body: Any, model: str) -> None:
        body = body or {}
        conv = _conversation(protocol, body)
        n, step = resolve_step(self.server.owner.script, conv)
        status = int(step["http_error"]) if "http_error" in step else 200
        self._record(
            protocol=protocol,
            kind=KIND_TURN,
            model=model,
            body=body,
            user_texts=conv.user_texts,
            tool_results=conv.tool_results,
            model_outputs=conv.model_outputs,
            step_index=n,
            step=step,
            status=status,
        )
        delay = float(step.get("delay") or 0)
        if delay > 0 and self.server.owner._stopping.wait(delay):
            return  # server shutting down: drop the connection
        if "http_error" in step:
            message = step.get("message") or f"scripted HTTP {status} at step {n}"
            self._send_json(status, error_body(protocol, status, message))
            return
        if "text" not in step and "shell" not in step:
            step = {**step, "text": "(delayed)"}
        if protocol == PROTO_OPENAI:
            self._send_sse(responses_events(step, conv, model))
        elif protocol == PROTO_CHAT and body.get("stream") is True:
            self._send_sse(chat_chunks(step, conv, model, body))
        elif protocol == PROTO_CHAT:
            self._send_json(200, chat_completion(step, conv, model, body))
        elif protocol == PROTO_GEMINI:
            self._send_sse(gemini_chunks(step, conv, model))
        else:
            self._send_sse(anthropic_events(step, conv, model))


def _conversation(protocol: str, body: dict) -> Conversation:
    if protocol == PROTO_OPENAI:
        return conversation_from_responses(body)
    if protocol == PROTO_CHAT:
        return conversation_from_chat(body)
    if protocol == PROTO_GEMINI:
        return conversation_from_gemini(body)
    return conversation_from_anthropic(body)


def _count_tokens(body: Any) -> int:
    return max(1, len(json.dumps(body or {})) // 4)


def _gemini_side_answer(body: Any, model: str) -> dict[str, Any]:
    config = (body or {}).get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is not None or config.get("responseMimeType") == "application/json":
        text = json.dumps(value_for_schema(schema or {"type": "object"}))
    else:
        text = "Scripted session"
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": model,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ScriptedModelServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)


class ScriptedModelServer:
    """The fake model server; see the module docstring. Use as a context manager."""

    def __init__(
        self,
        script: Any = None,
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
    ) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._script: Any = DEFAULT_SCRIPT
        self._stopping = threading.Event()
        self.verbose = verbose
        self.set_script(DEFAULT_SCRIPT if script is None else script)
        self._httpd = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    # -- configuration ------------------------------------------------------------------------

    @property
    def script(self) -> Any:
        with self._lock:
            return self._script

    def set_script(self, script: Any) -> None:
        validate_script(script)
        with self._lock:
            self._script = script

    @property
    def host(self) -> str:
        return self._httpd.server_address[0]

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- recorded requests --------------------------------------------------------------------

    def _append(self, rec: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(rec)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot (copy) of every request recorded so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def turn_requests(self, protocol: str | None = None) -> list[RecordedRequest]:
        """Only the scripted conversation steps (no side calls / unknown routes)."""
        return [r for r in self.requests if r.kind == KIND_TURN and (protocol is None or r.protocol == protocol)]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reqs = self.requests
            if len(reqs) >= count:
                return reqs
            time.sleep(0.02)
        raise TimeoutError(f"expected {count} requests, got {len(self.requests)}")

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"scripted-model-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Scripted fake LLM server (OpenAI Responses and Chat Completions, Gemini, Anthropic)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18001)
    parser.add_argument("--script", help="JSON file: a list of steps or a match/default selector")
    parser.add_argument("--quiet", action="store_true", help="do not log each request")
    args = parser.parse_args(argv)
    script = None
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = json.load(fh)
    server = ScriptedModelServer(script, host=args.host, port=args.port, verbose=False)
    server.start()
    print(f"scripted model server on {server.url}", flush=True)
    seen = 0
    try:
        while True:
            time.sleep(0.2)
            reqs = server.requests
            if not args.quiet:
                for rec in reqs[seen:]:
                    print(
                        f"{rec.status} {rec.protocol} {rec.kind} {rec.method} {rec.path} "
                        f"step={rec.step_index} user_turns={rec.user_turns} "
                        f"last={rec.latest_user_text[:60]!r} answer={json.dumps(rec.step)}",
                        flush=True,
                    )
            seen = len(reqs)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
