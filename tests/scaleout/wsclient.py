"""A small blocking websocket client (RFC 6455) for talking to a real daphne over loopback.

Just enough for tests: the upgrade with arbitrary headers (token, cookie, origin), text and
close frames, answering pings. No extensions, no TLS. Every read has a timeout.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class HandshakeRefused(Exception):
    def __init__(self, status: int, head: str):
        super().__init__(f"websocket upgrade refused with HTTP {status}")
        self.status = status
        self.head = head


class Closed(Exception):
    def __init__(self, code: int | None):
        super().__init__(f"closed with code {code}")
        self.code = code


class WebSocket:
    def __init__(self, port: int, path: str, headers: dict[str, str] | None = None, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.close_code: int | None = None
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: 127.0.0.1:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *[f"{name}: {value}" for name, value in (headers or {}).items()],
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        status = int(head.split(" ", 2)[1])
        if status != 101:
            self.sock.close()
            raise HandshakeRefused(status, head)

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed(None)
            self.buffer += chunk
        head, self.buffer = self.buffer.split(marker, 1)
        return head

    def _read_exact(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed(self.close_code)
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def _frame(self) -> tuple[bool, int, bytes]:
        first, second = self._read_exact(2)
        length = second & 0x7F
        if length == 126:
            length = struct.unpack("!H", self._read_exact(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", self._read_exact(8))[0]
        mask = self._read_exact(4) if second & 0x80 else None
        payload = self._read_exact(length)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(first & 0x80), first & 0x0F, payload

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next JSON message; raises Closed (with the server's close code) at the end."""
        self.sock.settimeout(timeout)
        parts: list[bytes] = []
        while True:
            fin, opcode, payload = self._frame()
            if opcode == OP_PING:
                self._send(OP_PONG, payload)
                continue
            if opcode == OP_CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise Closed(self.close_code)
            if opcode in (OP_TEXT, OP_BINARY, OP_CONT):
                parts.append(payload)
                if fin:
                    return json.loads(b"".join(parts).decode())

    def recv_until_closed(self, timeout: float = 10.0, limit: int = 1000) -> list[dict[str, Any]]:
        """Every message until the server closes (bounded by `limit` messages)."""
        messages = []
        for _ in range(limit):
            try:
                messages.append(self.recv(timeout))
            except Closed:
                return messages
        raise AssertionError(f"the socket sent more than {limit} messages without closing")

    def send_json(self, message: Any) -> None:
        self._send(OP_TEXT, json.dumps(message).encode())

    def close(self) -> None:
        try:
            self._send(OP_CLOSE, struct.pack("!H", 1000))
        except OSError:
            pass
        self.sock.close()
