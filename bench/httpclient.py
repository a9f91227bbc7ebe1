"""A keep-alive JSON client for the /v1 API (one persistent connection per instance and thread)."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any


class Api:
    def __init__(self, host: str, port: int, token: str, timeout: float = 30.0):
        self.host, self.port, self.token, self.timeout = host, port, token, timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._conn.connect()
            self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._conn

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Token {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):  # a keep-alive connection the server closed meanwhile is reopened once
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt == 2:
                    raise
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.request("POST", path, body if body is not None else {})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
