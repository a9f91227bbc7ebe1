"""A blocking websocket client for tests and benchmarks against a real daphne on loopback,
over the `websockets` library: JSON messages, bounded reads, the close code when the server ends."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect


class HandshakeRefused(Exception):
    def __init__(self, status: int):
        super().__init__(f"websocket upgrade refused with HTTP {status}")
        self.status = status


class Closed(Exception):
    def __init__(self, code: int | None):
        super().__init__(f"closed with code {code}")
        self.code = code


class WebSocket:
    close_code: int | None = None

    def __init__(
        self,
        port: int,
        path: str,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
        host: str = "127.0.0.1",
    ):
        headers = dict(headers or {})
        # The library sends no Origin unless asked; tests set one (or deliberately none).
        origin = headers.pop("Origin", None)
        # Entered as a context manager (closed by close()), as websockets 17.1+ asks of connect().
        self._context = contextlib.ExitStack()
        try:
            self.connection: ClientConnection = self._context.enter_context(
                connect(
                    f"ws://{host}:{port}{path}",
                    additional_headers=headers,
                    origin=origin,
                    open_timeout=timeout,
                    max_size=None,
                )
            )
        except InvalidStatus as refused:
            raise HandshakeRefused(refused.response.status_code) from refused

    def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        try:
            return json.loads(self.connection.recv(timeout=timeout))
        except ConnectionClosed as closed:
            raise Closed(closed.rcvd.code if closed.rcvd else None) from closed

    def recv_until_closed(self, timeout: float = 10.0, limit: int = 1000) -> list[dict[str, Any]]:
        """Every message until the server closes; its close code is kept in `close_code`."""
        messages = []
        for _ in range(limit):
            try:
                messages.append(self.recv(timeout))
            except Closed as closed:
                self.close_code = closed.code
                return messages
        raise AssertionError(f"the server sent more than {limit} messages without closing")

    def send_json(self, message: Any) -> None:
        self.connection.send(json.dumps(message))

    def close(self) -> None:
        self._context.close()
