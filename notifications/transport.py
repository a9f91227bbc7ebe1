"""One HTTP POST to a checked destination, connecting to its checked address (R-NT2).

http.client follows no redirects, so a 3xx is just an answer (not a success). The Host header
and TLS server name stay the URL's host name, so virtual hosts and certificates work as usual.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

from .destinations import Destination

# Only the status code decides; a receiver's body is read this far at most, and its start kept
# for the owner's delivery page.
MAX_RESPONSE_BYTES = 64 * 1024
RESPONSE_EXCERPT_BYTES = 2048


@dataclass(frozen=True)
class Answer:
    status_code: int | None
    error: str
    duration_ms: int
    body_excerpt: str = ""

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, destination: Destination, timeout: float):
        super().__init__(destination.host, destination.port, timeout=timeout)
        self.address = destination.address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, destination: Destination, timeout: float):
        super().__init__(destination.host, destination.port, timeout=timeout, context=ssl.create_default_context())
        self.address = destination.address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]  # HTTPSConnection sets _context; typeshed leaves it out


def post(destination: Destination, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST `body`; network errors and timeouts are answers too (status None, error text)."""
    connection_class = _PinnedHTTPSConnection if destination.scheme == "https" else _PinnedHTTPConnection
    connection = connection_class(destination, timeout)
    started = time.monotonic()
    try:
        connection.request("POST", destination.target, body=body, headers=headers)
        response = connection.getresponse()
        excerpt = response.read(MAX_RESPONSE_BYTES)[:RESPONSE_EXCERPT_BYTES].decode("utf-8", errors="replace")
        return Answer(response.status, "", _ms_since(started), excerpt)
    except (OSError, http.client.HTTPException) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}"[:500], _ms_since(started))
    finally:
        connection.close()


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
