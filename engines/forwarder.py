"""The sandbox's one way out in ``provider`` network mode (R-SB5).

Inside the sandbox, ``socat`` relays a loopback TCP port to a Unix socket; this forwarder, in
the service, accepts on that socket and relays each connection to the configured provider
(plain TCP, or TLS for https). It reads only the head of the request: the placeholder key the
engine was given is replaced with the operator's real key, ``Host`` names the provider and
``Connection: close`` keeps it to one request per connection, so every request passes through
this replacement. Bodies and responses (SSE streams included) are relayed byte for byte.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path
from urllib.parse import urlsplit

_MAX_HEAD = 256 * 1024
_CONNECT_TIMEOUT = 30.0
_REPLACED_HEADERS = {b"host", b"connection", b"proxy-connection", b"keep-alive"}


class ProviderForwarder:
    """A Unix-socket listener relaying each connection to one provider host and port."""

    def __init__(self, path: Path, provider_url: str, placeholder: str, api_key: str | None):
        upstream = urlsplit(provider_url)
        self.path = path
        self._tls = upstream.scheme == "https"
        self._host = upstream.hostname or ""
        self._port = upstream.port or (443 if self._tls else 80)
        default_port = (443 if self._tls else 80) == self._port
        self._host_header = (self._host if default_port else f"{self._host}:{self._port}").encode()
        self._placeholder = placeholder.encode()
        self._key = (api_key or placeholder).encode()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        os.chmod(path, 0o666)  # the sandbox's unprivileged uid connects to it
        self._server.listen(64)
        threading.Thread(target=self._accept, name="sandbox-forwarder", daemon=True).start()

    def close(self) -> None:
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            head, rest = _read_head(client)
            if head is None:
                return
            upstream = socket.create_connection((self._host, self._port), timeout=_CONNECT_TIMEOUT)
            if self._tls:
                upstream = ssl.create_default_context().wrap_socket(upstream, server_hostname=self._host)
            upstream.settimeout(None)
            upstream.sendall(self._rewrite(head) + rest)
            relay = threading.Thread(target=_pipe, args=(client, upstream), daemon=True)
            relay.start()
            _pipe(upstream, client)
            relay.join(timeout=1)
        except OSError:
            pass
        finally:
            client.close()
            if upstream is not None:
                upstream.close()

    def _rewrite(self, head: bytes) -> bytes:
        request_line, *headers = head.replace(self._placeholder, self._key).split(b"\r\n")
        kept = [line for line in headers if line.split(b":", 1)[0].strip().lower() not in _REPLACED_HEADERS]
        lines = [request_line, *kept, b"Host: " + self._host_header, b"Connection: close"]
        return b"\r\n".join(lines) + b"\r\n\r\n"


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    """The request head (without its blank line) and whatever body bytes came with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk or len(data) > _MAX_HEAD:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass
