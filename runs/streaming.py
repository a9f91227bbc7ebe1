"""Server-sent events for GET /v1/jobs/{id}/events, read from the event log only."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async

from .live import RunChangeWaiter
from .models import TERMINAL_STATUSES, Run, RunEvent

HEARTBEAT_SECONDS = 15.0


def _next_batch(request_id, cursor: int) -> tuple[list[RunEvent], str | None]:
    events = list(RunEvent.objects.filter(run_id=request_id, seq__gt=cursor).order_by("seq")[:200])
    status = Run.objects.filter(pk=request_id).values_list("status", flat=True).first()
    return events, status


def _frame(event: RunEvent) -> str:
    data = json.dumps(event.as_message(), ensure_ascii=False)
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n"


async def event_stream(request_id, after_seq: int) -> AsyncIterator[str]:
    """Every event after the cursor, then live ones; ends once the run is terminal and drained."""
    cursor = after_seq
    last_sent = time.monotonic()
    async with RunChangeWaiter(request_id) as waiter:
        while True:
            events, status = await sync_to_async(_next_batch)(request_id, cursor)
            for event in events:
                cursor = event.seq
                yield _frame(event)
                last_sent = time.monotonic()
            if events:
                continue
            if status is None or status in TERMINAL_STATUSES:
                yield "event: end\ndata: {}\n\n"
                return
            if time.monotonic() - last_sent > HEARTBEAT_SECONDS:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
            await waiter.wait()
