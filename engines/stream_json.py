"""Claude Code's ``stream-json`` output, which Qwen Code prints in the same shapes.

One JSON object per line: ``system``/``init`` (the session id), ``assistant`` messages whose
content blocks are ``text``, ``thinking`` and ``tool_use``, ``user`` messages carrying the
``tool_result`` blocks, and a ``result`` event that ends the turn (``result`` text, ``is_error``,
``subtype``, ``usage``). The CLIs differ in their tool names and in how they count tokens, so each
adapter subclasses the activity parser with its own tool tables and reads usage itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from .activity import Activity, ActivityParser, text_of, tool_summary
from .base import EngineOutput, json_lines


def is_result(event: dict[str, Any]) -> bool:
    return event.get("type") == "result"


def assistant_text(event: dict[str, Any]) -> str:
    """The text blocks of an ``assistant`` event, joined."""
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        block.get("text", "") for block in content if isinstance(block, dict) and block.get("type") == "text"
    )


class StreamJsonActivity(ActivityParser):
    """Assistant text/thinking/tool_use blocks and the user tool_result blocks (R-AC1)."""

    file_tools: ClassVar[tuple[str, ...]]  # tools whose input names the file they write (file changes too)
    plan_tool: ClassVar[str]  # the to-do list tool, whose `todos` are shown as a plan
    summary_keys: ClassVar[tuple[str, ...]]  # the arguments that say what a tool call does

    def __init__(self) -> None:
        super().__init__()
        self._file_tools: dict[str, str] = {}  # tool id -> path written
        self._plan_calls: set[str] = set()  # ids of to-do list updates, shown as plans, not tools

    def on_event(self, event: dict[str, Any]) -> list[Activity]:
        kind = event.get("type")
        if kind == "result":
            self.drop_held_text()
            return []
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if kind not in ("assistant", "user") or not isinstance(content, list):
            return []
        items: list[Activity] = []
        for block in content:
            if isinstance(block, dict):
                items += self._block(block)
        return items

    def _block(self, block: dict[str, Any]) -> list[Activity]:
        block_type = block.get("type")
        if block_type == "text":
            return self.message_text(str(block.get("text") or ""))
        if block_type == "thinking":
            return self.reasoning(str(block.get("thinking") or ""))
        if block_type == "tool_use":
            return self._tool_use(str(block.get("id") or ""), str(block.get("name") or ""), block.get("input"))
        if block_type == "tool_result":
            tool_id = str(block.get("tool_use_id") or "")
            if tool_id in self._plan_calls:
                self._plan_calls.discard(tool_id)
                return self.release_text()
            ok = not block.get("is_error")
            items = self.tool_finished(tool_id, ok=ok, output=text_of(block.get("content")))
            path = self._file_tools.pop(tool_id, None)
            if ok and path:
                items.append({"type": "file_change", "paths": [path]})
            return items
        return []

    def _tool_use(self, tool_id: str, name: str, tool_input: Any) -> list[Activity]:
        if name == self.plan_tool and isinstance(tool_input, dict) and isinstance(tool_input.get("todos"), list):
            self._plan_calls.add(tool_id)
            return self.todo_plan(tool_input["todos"])
        if name in self.file_tools and isinstance(tool_input, dict):
            path = tool_input.get("file_path") or tool_input.get("notebook_path")
            if isinstance(path, str):
                self._file_tools[tool_id] = path
        return self.tool_started(tool_id, name, tool_summary(tool_input, self.summary_keys))


UsageReader = Callable[[list[dict[str, Any]], dict[str, Any]], dict[str, Any] | None]


def stream_json_output(stdout: str, engine: str, usage_of: UsageReader) -> EngineOutput:
    """The turn's session id, final message (the result's text, else the last assistant text),
    usage (``usage_of(events, result event)``) and the failure the result reports, if any."""
    output = EngineOutput()
    result: dict[str, Any] | None = None
    events = json_lines(stdout)
    for event in events:
        if output.session_handle is None and isinstance(event.get("session_id"), str):
            output.session_handle = event["session_id"]  # system/init comes first
        if event.get("type") == "assistant":
            output.final_message = assistant_text(event) or output.final_message
        elif is_result(event):
            result = event
    if result is None:
        output.error = f"{engine} ended the turn without a result event"
        return output
    if isinstance(result.get("result"), str):
        output.final_message = result["result"]
    output.usage = usage_of(events, result)
    if result.get("is_error") or str(result.get("subtype", "success")) != "success":
        error = result.get("error")
        reported = error.get("message") if isinstance(error, dict) else None
        output.error = str(reported or output.final_message or f"{engine} turn failed ({result.get('subtype')})")
    return output
