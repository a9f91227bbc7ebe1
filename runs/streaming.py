"""Server-sent events for GET /v1/jobs/{id}/events, read from the event log only.

The stream is one of its user's live connections (R-FS2): the view opens it and the stream gives
it back when it ends, however it ends (a stream whose client left before it started is never
renewed, and stops counting after accounts.connections.LEASE_SECONDS). It reads the table only when woken, and ends with an `error` event
once its token is revoked or its browser session ends (R-FS3)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async

from accounts.connections import ENDED, close_connection
from accounts.models import LiveConnection

from .consumers import credential_ended
from .live import RunChangeWaiter
from .models import TERMINAL_STATUSES, Run, RunEvent

HEARTBEAT_SECONDS = 15.0


def _next_batch(request_id, cursor: int) -> tuple[list[RunEvent], str | None]:
    # The status first: a run read as terminal has committed its last event with that status, so
    # the events read next include it. Read the other way round, a run ending between the reads
    # looked terminal with its last events unread, and the stream ended without them.
    status = Run.objects.filter(pk=request_id).values_list("status", flat=True).first()
    events = list(RunEvent.objects.filter(run_id=request_id, seq__gt=cursor).order_by("seq")[:200])
    return events, status


def _frame(event: RunEvent) -> str:
    data = json.dumps(event.as_message(), ensure_ascii=False)
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n"


async def event_stream(request_id, after_seq: int, connection: LiveConnection) -> AsyncIterator[str]:
    """Every event after the cursor, then live ones; ends once the run is terminal and drained."""
    cursor = after_seq
    try:
        async with RunChangeWaiter(request_id, connection) as waiter:
            while True:
                events, status = await sync_to_async(_next_batch)(request_id, cursor)
                for event in events:
                    cursor = event.seq
                    yield _frame(event)
                if events:
                    continue
                if status is None or status in TERMINAL_STATUSES:
                    yield "event: end\ndata: {}\n\n"
                    return
                while (notification := await waiter.wait(timeout=HEARTBEAT_SECONDS)) is None:
                    yield ": keep-alive\n\n"
                if notification == ENDED:
                    yield f"event: error\ndata: {json.dumps(credential_ended().as_detail())}\n\n"
                    return
    finally:
        await sync_to_async(close_connection)(connection.pk)
