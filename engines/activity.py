"""Engine-neutral activity items read from engine output while a turn runs (R-AC1).

Each adapter has an incremental parser: fed one stdout line at a time (on the process's reader
thread), it returns the activity items that line completes. An item is a plain dict:

* ``{"type": "reasoning", "text"}`` — a reasoning summary;
* ``{"type": "message", "text"}`` — assistant text that is *not* the turn's final answer (a
  message is held back until something follows it, so the final answer never shows twice);
* ``{"type": "tool", "id", "phase": "started"|"finished", "name", "command"}`` plus, once
  finished, ``"status": "ok"|"failed"``, ``"exit_code"``, ``"duration_ms"`` and ``"output"``;
* ``{"type": "file_change", "paths"}`` and ``{"type": "plan", "items": [{"text", "done"}]}``.

Sizes are not capped here: the caller decides what it keeps. The final turn result never comes
from these items; adapters still read it from the complete output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .types import json_object

Activity = dict[str, Any]
ActivityHook = Callable[[Activity], None]


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tool_summary(arguments: Any, keys: tuple[str, ...]) -> str:
    """A tool call in one line: the first of `keys` its arguments hold as text, else them all."""
    if isinstance(arguments, dict):
        for key in keys:
            if isinstance(arguments.get(key), str):
                return arguments[key]
    return compact_json(arguments)


class ActivityParser:
    """Base of the per-engine parsers: JSON line decoding, tool bookkeeping, held-back text."""

    def __init__(self) -> None:
        self._tools: dict[str, tuple[str, str, float]] = {}  # id -> name, command, start time
        self._held_text: list[str] = []

    def feed(self, line: str) -> list[Activity]:
        """The activity items completed by one output line (non-JSON lines yield nothing)."""
        line = line.strip()
        if not line.startswith("{"):
            return []
        event = json_object(line)
        return self.on_event(event) if event is not None else []

    def on_event(self, event: dict[str, Any]) -> list[Activity]:
        raise NotImplementedError

    # ---- helpers for subclasses ------------------------------------------------------------

    def hold_text(self, text: str) -> None:
        """Assistant text that may turn out to be the final answer: kept until something follows."""
        if text:
            self._held_text.append(text)

    def drop_held_text(self) -> None:
        """The turn ended: what is held is the final answer, reported by the turn result."""
        self._held_text = []

    def release_text(self) -> list[Activity]:
        """Something followed the held text, so it was an intermediate message."""
        text = "".join(self._held_text).strip()
        self._held_text = []
        return [{"type": "message", "text": text}] if text else []

    def message_text(self, text: str) -> list[Activity]:
        """Assistant text: what was held before it is released, it is held in turn."""
        released = self.release_text()
        self.hold_text(text)
        return released

    def reasoning(self, text: str) -> list[Activity]:
        text = text.strip()
        return [*self.release_text(), {"type": "reasoning", "text": text}] if text else []

    def todo_plan(self, todos: Any) -> list[Activity]:
        """A to-do list tool's call (``[{content, status}]``) as the turn's plan."""
        steps = [
            {"text": str(todo.get("content") or ""), "done": todo.get("status") == "completed"}
            for todo in (todos if isinstance(todos, list) else [])
            if isinstance(todo, dict)
        ]
        return [*self.release_text(), {"type": "plan", "items": steps}]

    def tool_started(self, tool_id: str, name: str, command: str) -> list[Activity]:
        self._tools[tool_id] = (name, command, time.monotonic())
        return [
            *self.release_text(),
            {"type": "tool", "id": tool_id, "phase": "started", "name": name, "command": command},
        ]

    def tool_finished(
        self,
        tool_id: str,
        *,
        ok: bool,
        output: str = "",
        exit_code: int | None = None,
        duration_ms: int | None = None,
        name: str = "",
        command: str = "",
    ) -> list[Activity]:
        known_name, known_command, started = self._tools.pop(tool_id, (name, command, None))
        if duration_ms is None and started is not None:
            duration_ms = round((time.monotonic() - started) * 1000)
        return [
            *self.release_text(),
            {
                "type": "tool",
                "id": tool_id,
                "phase": "finished",
                "name": known_name or name,
                "command": known_command or command,
                "status": "ok" if ok else "failed",
                "exit_code": exit_code,
                "duration_ms": duration_ms,
                "output": output,
            },
        ]


class NoActivity(ActivityParser):
    """For CLIs whose output carries no structure to read while they run (iFlow's plain text)."""

    def feed(self, line: str) -> list[Activity]:
        return []


def text_of(content: Any) -> str:
    """Text of a tool result that may be a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", "")) if isinstance(block, dict) else str(block) for block in content
        ).strip()
    return "" if content is None else compact_json(content)


def tokens(value: Any) -> int | None:
    """A token count as reported, or None when absent or not a number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_report(
    input_tokens: Any = None,
    cached_input_tokens: Any = None,
    output_tokens: Any = None,
    reasoning_tokens: Any = None,
    cost_usd: Any = None,
) -> dict[str, Any]:
    """One turn's usage as the engine reported it (R-AC4); unreported keys are None."""
    cost = cost_usd if isinstance(cost_usd, int | float) and not isinstance(cost_usd, bool) else None
    return {
        "input_tokens": tokens(input_tokens),
        "cached_input_tokens": tokens(cached_input_tokens),
        "output_tokens": tokens(output_tokens),
        "reasoning_tokens": tokens(reasoning_tokens),
        "cost_usd": float(cost) if cost is not None else None,
    }
