"""A minimal RFC 6455 websocket client on the standard library (the venv has no `websockets`).

Enough for the run socket: the upgrade with extra headers (`Authorization: Token …`), unmasked
text frames from the server (fragmented or not), ping → pong, close; masked text frames out.
Blocking, one socket per client, every read bounded by a deadline.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import time
from typing import Any

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class WebSocketClosed(Exception):
    def __init__(self, code: int | None):
        super().__init__(f"websocket closed with code {code}")
        self.code = code


class WebSocket:
    def __init__(self, host: str, port: int, path: str, headers: dict[str, str] | None = None, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{name}: {value}" for name, value in (headers or {}).items()),
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._buffer:
            self._fill(deadline)
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in status_line + " ":
            raise ConnectionError(f"websocket upgrade refused: {status_line}")
        answer = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
        expected = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
        if answer.get("sec-websocket-accept") != expected:
            raise ConnectionError("websocket upgrade answered with a wrong Sec-WebSocket-Accept")

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("websocket read timed out")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout as exc:
            raise TimeoutError("websocket read timed out") from exc
        if not chunk:
            raise WebSocketClosed(None)
        self._buffer += chunk

    def _take(self, count: int, deadline: float) -> bytes:
        while len(self._buffer) < count:
            self._fill(deadline)
        data, self._buffer = self._buffer[:count], self._buffer[count:]
        return data

    def _frame(self, deadline: float) -> tuple[bool, int, bytes]:
        first, second = self._take(2, deadline)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._take(2, deadline))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._take(8, deadline))
        mask = self._take(4, deadline) if second & 0x80 else None
        payload = self._take(length, deadline)
        if mask:
            payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
        return bool(first & 0x80), first & 0x0F, payload

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def recv_text(self, timeout: float) -> str:
        """The next text message; raises WebSocketClosed on a close frame, TimeoutError at the deadline."""
        deadline = time.monotonic() + timeout
        parts: list[bytes] = []
        while True:
            fin, opcode, payload = self._frame(deadline)
            if opcode == OP_PING:
                self._send(OP_PONG, payload)
            elif opcode == OP_CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise WebSocketClosed(code)
            elif opcode in (OP_TEXT, OP_BINARY, OP_CONT):
                parts.append(payload)
                if fin:
                    return b"".join(parts).decode("utf-8")

    def recv_json(self, timeout: float) -> Any:
        return json.loads(self.recv_text(timeout))

    def send_json(self, message: Any) -> None:
        self._send(OP_TEXT, json.dumps(message).encode())

    def close(self) -> None:
        try:
            self._send(OP_CLOSE, struct.pack("!H", 1000))
        except OSError:
            pass
        self.sock.close()
