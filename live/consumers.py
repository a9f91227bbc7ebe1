"""The run chat socket `/ws/runs/<request_id>/?after_seq=N` (R-UI2).

Out: a snapshot, then every event after the cursor, then live events, all read from the event
log (R-UI1). In: replies and cancels, handed to the same services as the REST endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model
from rest_framework.exceptions import Throttled, ValidationError

from accounts.connections import ENDED, TooManyStreams, close_connection, open_connection
from accounts.models import LiveConnection
from kernel.api_errors import exception_handler
from kernel.errors import ApplicationError, NotFound
from runs import replies, selectors, services
from runs.models import TERMINAL_STATUSES, Run, RunEvent
from runs.selectors import EVENT_PAGE_LIMIT
from runs.serializers import RunStatusOutput

from .shutdown import CLOSE_GOING_AWAY, CLOSE_INTERNAL_ERROR, open_sockets
from .watcher import RunChangeWaiter

logger = logging.getLogger(__name__)

# How long a stopping web process waits for each client to acknowledge its 1001 (R-OP10).
GOING_AWAY_SECONDS = 2.0

CLOSE_NORMAL = 1000
CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY_STREAMS = 4429


def parse_after_seq(query_string: bytes) -> int:
    raw = parse_qs(query_string.decode("latin-1")).get("after_seq", ["0"])[-1] or "0"
    if not (raw.isascii() and raw.isdigit()):  # "²".isdigit() is true, and int() refuses it
        raise ApplicationError("INVALID_CURSOR", "after_seq must be a non-negative integer")
    return int(raw)


def snapshot(user, request_id: str) -> tuple[Run, dict[str, Any]]:
    """The run as GET /v1/jobs/{id} shows it, its pending question and the newest event seq."""
    run = selectors.run_for(user, request_id)
    message = {
        "type": "snapshot",
        "run": RunStatusOutput(run).data,
        "pending": selectors.pending_payload(run),
        "last_seq": run.last_event_seq,
    }
    return run, message


def current_user(user):
    """The caller as the database has it now: a socket lives long, and rights can change meanwhile."""
    fresh = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    if fresh is None:
        raise ApplicationError("NOT_AUTHENTICATED", "this account is no longer active", status_code=401)
    return fresh


def reply(user, request_id: str, message: dict[str, Any]) -> dict[str, Any]:
    # The REST endpoint's way in: visibility checked again for every message, the same rate budget.
    run = replies.receive_reply(current_user(user), request_id, lambda _run: replies.SentReply(message))
    return {"type": "ack", "action": "reply", "request_id": str(run.pk), "status": run.status, "accepted": True}


def cancel(user, request_id: str) -> dict[str, Any]:
    run, accepted = services.cancel_run(selectors.run_for(current_user(user), request_id))
    return {"type": "ack", "action": "cancel", "request_id": str(run.pk), "status": run.status, "accepted": accepted}


def error_message(exc: Exception) -> dict[str, Any]:
    """The REST error envelope's detail as a socket message, so both transports share codes."""
    return {"type": "error", **exception_handler(exc, {}).data["detail"]}


def ends_run(event: RunEvent) -> bool:
    return event.kind == "status" and event.payload.get("to") in TERMINAL_STATUSES


def credential_ended() -> ApplicationError:
    return ApplicationError("NOT_AUTHENTICATED", "the token or session of this connection has ended", status_code=401)


class LiveConnectionConsumer(AsyncJsonWebsocketConsumer):
    """A socket counted toward its user's cap of live connections (R-FS2) and closed with 4401
    when its token is revoked or its browser session ends (R-FS3)."""

    connection: LiveConnection | None = None
    tail_task: asyncio.Task | None = None
    talking = False  # accepted, and neither side has closed yet
    # No channel of its own in the channel layer: live.watcher wakes it. An alias naming no layer gets
    # none (channels.layers.get_channel_layer); with one, every socket kept a receive of its own
    # waiting on the layer, for messages nothing sends to it.
    channel_layer_alias = "none"

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            # Cancelled by a stopping web process (live.shutdown): the client is told the server
            # goes away (1001), and resumes from its last seq on another one (R-OP10).
            if self.talking:
                await asyncio.wait_for(self.go_away(receive), GOING_AWAY_SECONDS + 1)
            raise
        finally:
            open_sockets.discard(asyncio.current_task())

    async def go_away(self, receive) -> None:
        """Stop sending, close with 1001, and end as a disconnect does once the client has
        acknowledged, or after GOING_AWAY_SECONDS."""
        if self.tail_task is not None:
            self.tail_task.cancel()
            await asyncio.wait([self.tail_task])
        await self.close(code=CLOSE_GOING_AWAY)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GOING_AWAY_SECONDS):
                while (await receive())["type"] != "websocket.disconnect":
                    pass
        await self.disconnect(CLOSE_GOING_AWAY)

    async def accept(self, subprotocol=None, headers=None) -> None:
        await super().accept(subprotocol, headers)
        self.talking = True
        application = asyncio.current_task()  # the socket's application: connect() runs in it
        assert application is not None
        open_sockets.add(application)

    async def close(self, code=None, reason=None) -> None:
        self.talking = False
        await super().close(code, reason)

    async def open_live_connection(self) -> bool:
        """Accept the socket for an authenticated user with room under the cap, or close it: 4401, 4429."""
        # Accept before closing with a code: a close sent during the handshake reaches the
        # client as a bare rejection, and it could not tell 4401 from 4404.
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return False
        session = self.scope.get("session")
        try:
            self.connection = await database_sync_to_async(open_connection)(
                user,
                token=self.scope.get("api_token"),
                session_key=session.session_key if session is not None else None,
            )
        except ApplicationError as exc:  # over the cap, or the token revoked a moment ago
            await self.send_json(error_message(exc))
            await self.close(code=CLOSE_TOO_MANY_STREAMS if isinstance(exc, TooManyStreams) else CLOSE_UNAUTHENTICATED)
            return False
        return True

    async def end_for_credential(self) -> None:
        await self.send_json(error_message(credential_ended()))
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def disconnect(self, code: int) -> None:
        self.talking = False
        if self.tail_task is not None:
            self.tail_task.cancel()
        if self.connection is not None:
            await database_sync_to_async(close_connection)(self.connection.pk)


class RunConsumer(LiveConnectionConsumer):
    run: Run | None = None

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        # Taken by the tail for each batch and by each client action until its answer is sent,
        # so an action's answer always goes out before the close its own effect may cause.
        self.turn = asyncio.Lock()
        if not await self.open_live_connection():
            return
        try:
            cursor = parse_after_seq(self.scope.get("query_string", b""))
            self.run, first = await database_sync_to_async(snapshot)(
                self.user, self.scope["url_route"]["kwargs"]["request_id"]
            )
        except NotFound:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        except ApplicationError as exc:
            await self.send_json(error_message(exc))
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        await self.send_json(first)
        self.tail_task = asyncio.create_task(self.tail(cursor, finished=first["run"]["status"] in TERMINAL_STATUSES))

    async def tail(self, cursor: int, *, finished: bool) -> None:
        """Send events after `cursor` as they are committed; close once a finished run is drained."""
        run = self.run
        assert run is not None  # tailing starts only once connect accepted the run
        try:
            async with RunChangeWaiter(run.pk, self.connection) as waiter:
                while True:
                    async with self.turn:
                        # Subscribed before this read, so an event committed meanwhile wakes the next wait.
                        _, events = await waiter.status_and_events(cursor)
                        for event in events:
                            await self.send_json(event.as_message())
                            cursor = event.seq
                            finished = finished or ends_run(event)
                        if len(events) == EVENT_PAGE_LIMIT:
                            continue
                        if finished:
                            await self.close(code=CLOSE_NORMAL)
                            return
                    if await waiter.wait() == ENDED:
                        async with self.turn:
                            await self.end_for_credential()
                        return
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("run socket for %s stopped", run.pk)
            await self.close(code=CLOSE_INTERNAL_ERROR)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        if self.run is None:
            return  # refused at connect; the close is on its way
        try:
            message = json.loads(text_data or "")
        except (ValueError, RecursionError):  # deeply nested input exhausts the parser's stack
            message = None
        if not isinstance(message, dict):
            await self.send_json(
                error_message(ApplicationError("MALFORMED_REQUEST", "send one JSON object per message"))
            )
            return
        await self.receive_json(message)

    async def receive_json(self, content: dict[str, Any], **kwargs: Any) -> None:
        if self.run is None:
            return  # refused at connect
        request_id = str(self.run.pk)
        async with self.turn:
            try:
                if content.get("type") == "reply":
                    answer = await database_sync_to_async(reply)(self.user, request_id, content)
                elif content.get("type") == "cancel":
                    answer = await database_sync_to_async(cancel)(self.user, request_id)
                else:
                    raise ApplicationError("UNKNOWN_MESSAGE_TYPE", 'type must be "reply" or "cancel"')
            except (ApplicationError, ValidationError, Throttled) as exc:
                answer = error_message(exc)
            await self.send_json(answer)
