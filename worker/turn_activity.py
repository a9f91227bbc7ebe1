"""A turn's agent activity as run events (R-AC1, R-AC2): the items `engines.activity` reads from
engine output become `activity` events.

The engine's output reader thread hands items to an ActivitySink, which never blocks it; the
sink's own thread appends them through runs.services.append_activity while the turn is still
this worker's, so they reach websockets and SSE like every other event. Volume is bounded here:

* text (reasoning, messages) is coalesced: consecutive text items merge, and text is written at
  most once per TEXT_INTERVAL_SECONDS (tool, file and plan items go at once, for latency);
* each payload is capped (long strings cut in the middle, long lists shortened, `truncated`);
* a turn writes at most SKILLRUNNER_ACTIVITY_MAX_EVENTS activity events, then one
  `activity_truncated` event and nothing more. The raw output stays complete in the run's logs.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection

from enginehost.config import configured_secrets
from kernel.logging import redact_values
from runs import services

logger = logging.getLogger(__name__)

TEXT_INTERVAL_SECONDS = 0.3
TEXT_KINDS = ("reasoning", "message")
# Per-field caps keep every payload within a few KB (R-AC2).
STRING_CAPS = {"text": 1500, "output": 1500, "command": 400}
DEFAULT_STRING_CAP = 200
LIST_CAP = 20
_STOP = object()
_CLOSE_TIMEOUT_SECONDS = 10.0


def _cut(text: str, limit: int) -> str:
    """Head and tail of an over-long string (the end of a command's output matters most)."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]}\n[… {len(text) - limit} characters omitted …]\n{text[len(text) - (limit - head) :]}"


def cap_payload(item: dict[str, Any]) -> dict[str, Any]:
    """The item with every string and list within its cap; `truncated: true` when anything was cut."""
    truncated = False

    def cap(value: Any, limit: int) -> Any:
        nonlocal truncated
        if isinstance(value, str):
            if len(value) > limit:
                truncated = True
            return _cut(value, limit)
        if isinstance(value, list):
            if len(value) > LIST_CAP:
                truncated = True
            return [cap(entry, DEFAULT_STRING_CAP) for entry in value[:LIST_CAP]]
        if isinstance(value, dict):
            return {key: cap(entry, DEFAULT_STRING_CAP) for key, entry in list(value.items())[:LIST_CAP]}
        return value

    capped = {key: cap(value, STRING_CAPS.get(key, DEFAULT_STRING_CAP)) for key, value in item.items()}
    if truncated:
        capped["truncated"] = True
    return capped


class ActivitySink:
    """One turn's activity: `put` from the reader thread, events written on the sink's thread."""

    def __init__(self, request_id, attempt_number: int, worker_id: str) -> None:
        self.request_id = request_id
        self.attempt_number = attempt_number
        self.worker_id = worker_id
        self.max_events = settings.SKILLRUNNER_ACTIVITY_MAX_EVENTS
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._written = 0
        self._stopped = False  # cap reached, claim lost or database trouble: drop the rest
        self._pending_text: dict[str, Any] | None = None
        self._last_text_at = 0.0
        self._secrets = configured_secrets()

    def put(self, item: dict[str, Any]) -> None:
        """Called on the engine's output reader thread: never blocks, never raises."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="activity-sink", daemon=True)
                self._thread.start()
        self._queue.put(item)

    def close(self) -> None:
        """Write what is pending and stop; called once the turn's process has ended."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(_CLOSE_TIMEOUT_SECONDS)

    # ---- the sink's thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                timeout = None
                if self._pending_text is not None:
                    timeout = max(0.0, self._last_text_at + TEXT_INTERVAL_SECONDS - time.monotonic())
                try:
                    first = self._queue.get(timeout=timeout)
                except queue.Empty:
                    self._write([self._take_text()])
                    continue
                batch, stop = self._drain(first)
                self._write(batch)
                if stop:
                    self._write([self._take_text()])
                    return
        finally:
            connection.close()  # this thread's own database connection

    def _drain(self, first: Any) -> tuple[list[dict[str, Any] | None], bool]:
        """Everything queued now, text merged; returns the items to write and whether to stop."""
        out: list[dict[str, Any] | None] = []
        item = first
        while True:
            if item is _STOP:
                return out, True
            if item.get("type") in TEXT_KINDS:
                pending = self._pending_text
                if pending is not None and pending["type"] == item["type"]:
                    pending["text"] = f"{pending['text']}\n\n{item.get('text', '')}"
                else:
                    out.append(self._take_text())
                    self._pending_text = dict(item)
            else:
                out += [self._take_text(), item]  # text first: the order of the stream is kept
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
        if self._pending_text is not None and time.monotonic() - self._last_text_at >= TEXT_INTERVAL_SECONDS:
            out.append(self._take_text())
        return out, False

    def _take_text(self) -> dict[str, Any] | None:
        pending, self._pending_text = self._pending_text, None
        if pending is not None:
            self._last_text_at = time.monotonic()
        return pending

    def _write(self, items: list[dict[str, Any] | None]) -> None:
        if self._stopped:
            return
        payloads: list[tuple[str, dict[str, Any]]] = []
        for item in items:
            if item is None:
                continue
            if self._written >= self.max_events:
                payloads.append(("activity_truncated", {"attempt": self.attempt_number, "limit": self.max_events}))
                self._stopped = True
                break
            payloads.append(("activity", {"attempt": self.attempt_number, **self._clean(item)}))
            self._written += 1
        if not payloads:
            return
        try:
            if not services.append_activity(self.request_id, self.attempt_number, self.worker_id, payloads):
                self._stopped = True  # the turn is no longer ours (canceled): nothing more to say
        except DatabaseError:
            # Activity is best effort: the turn's outcome is recorded regardless (R-AC2).
            logger.warning("could not record activity of run %s", self.request_id, exc_info=True)
            connection.close()

    def _clean(self, item: dict[str, Any]) -> dict[str, Any]:
        """Capped, and without the configured API keys (an agent may print its own key)."""
        capped = cap_payload(item)
        if not self._secrets:
            return capped
        text = json.dumps(capped, ensure_ascii=False)
        cleaned = redact_values(text, self._secrets)
        return capped if cleaned == text else json.loads(cleaned)
