"""Server-sent events read from the event log only: GET /v1/jobs/{id}/events, and any other
stream of a run's events that writes them in a framing of its own.

A stream is one of its user's live connections (R-FS2): the view opens it (sse_response) and the
stream gives it back when it ends, however it ends (a stream whose client left before it started
is never renewed, and stops counting after accounts.connections.LEASE_SECONDS). It reads the table
only when woken, and ends with an `error` event once its token is revoked or its browser session
ends (R-FS3)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

from channels.db import database_sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.views import APIView

from accounts.connections import ENDED, close_connection, open_connection
from accounts.models import ApiToken, LiveConnection
from kernel.negotiation import JsonWhateverTheClientAccepts
from runs.api import requested_after_seq
from runs.models import TERMINAL_STATUSES, RunEvent
from runs.selectors import run_for

from .consumers import credential_ended
from .watcher import RunChangeWaiter

HEARTBEAT_SECONDS = 15.0


class Framing(Protocol):
    """How a stream writes what the log says, and when it ends."""

    heartbeat_seconds: float

    def opening(self) -> str:
        """The stream's first bytes (may be none); called once, where the database may be read."""

    def frames(self, events: list[RunEvent]) -> Iterable[str]:
        """The frames of the next events of the log, in order (none for events it does not show)."""

    def keep_alive(self) -> str: ...

    def rests(self, status: str) -> bool:
        """Whether the stream ends at `status` once it has sent every event."""

    def closing(self) -> str: ...

    def credential_ended(self, detail: dict[str, Any]) -> str: ...


async def follow_log(request_id, cursor: int, connection: LiveConnection, framing: Framing) -> AsyncIterator[str]:
    """Every event after `cursor`, then live ones, as `framing` writes them; ends once the run
    rests (`framing.rests`, or gone) with every event sent."""
    try:
        async with RunChangeWaiter(request_id, connection) as waiter:
            # database_sync_to_async gives back the database connection the view took, as the
            # request's end would: a stream lasts, and on PostgreSQL each held one of the web
            # process's pooled connections, which the pool's size (16) then capped.
            if opening := await database_sync_to_async(framing.opening)():
                yield opening
            while True:
                status, events = await waiter.status_and_events(cursor)
                for frame in framing.frames(events):
                    yield frame
                if events:
                    cursor = events[-1].seq
                    continue
                if status is None or framing.rests(status):
                    if closing := framing.closing():
                        yield closing
                    return
                while (notification := await waiter.wait(timeout=framing.heartbeat_seconds)) is None:
                    yield framing.keep_alive()
                if notification == ENDED:
                    yield framing.credential_ended(credential_ended().as_detail())
                    return
    finally:
        await database_sync_to_async(close_connection)(connection.pk)


class EventFraming:
    """The service's own stream: one frame per event, named by its kind, with the seq as its id."""

    heartbeat_seconds = HEARTBEAT_SECONDS

    def opening(self) -> str:
        return ""

    def frames(self, events: list[RunEvent]) -> Iterable[str]:
        for event in events:
            data = json.dumps(event.as_message(), ensure_ascii=False)
            yield f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n"

    def keep_alive(self) -> str:
        return ": keep-alive\n\n"

    def rests(self, status: str) -> bool:
        return status in TERMINAL_STATUSES

    def closing(self) -> str:
        return "event: end\ndata: {}\n\n"

    def credential_ended(self, detail: dict[str, Any]) -> str:
        return f"event: error\ndata: {json.dumps(detail)}\n\n"


def event_stream(request_id, after_seq: int, connection: LiveConnection) -> AsyncIterator[str]:
    """Every event after the cursor, then live ones; ends once the run is terminal and drained."""
    return follow_log(request_id, after_seq, connection, EventFraming())


def sse_response(request, stream: Callable[[LiveConnection], AsyncIterator[str]]) -> StreamingHttpResponse:
    """The response of a view streaming `stream` as one of the caller's live connections; 429
    TOO_MANY_STREAMS past the user's cap (R-FS2)."""
    token = request.auth if isinstance(request.auth, ApiToken) else None
    connection = open_connection(request.user, token=token, session_key=None if token else request.session.session_key)
    response = StreamingHttpResponse(stream(connection), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


class EventStreamView(APIView):
    # The stream is a plain StreamingHttpResponse; DRF only renders this view's errors, always as
    # JSON, so clients that accept only text/event-stream (EventSource) are not refused (R-OP8).
    content_negotiation_class = JsonWhateverTheClientAccepts

    @extend_schema(
        parameters=[OpenApiParameter("after_seq", int)], responses={(200, "text/event-stream"): OpenApiTypes.STR}
    )
    def get(self, request, request_id):
        run = run_for(request.user, request_id)
        after_seq = requested_after_seq(request)
        return sse_response(request, lambda connection: event_stream(run.pk, after_seq, connection))
