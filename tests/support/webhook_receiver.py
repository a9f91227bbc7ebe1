"""A real local HTTP server that receives webhook deliveries, for tests and `make bench`.

It records every request (headers, raw body, arrival time) and answers from a script of status
codes (the last one repeats); a script entry "hang" holds the request open until `release()`.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() on arrival

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    answers: list[int | str] = field(default_factory=lambda: [200])
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.received.append(Received(self.path, dict(self.headers.items()), body, time.time()))
                    answer = receiver.answers[min(len(receiver.received), len(receiver.answers)) - 1]
                if answer == "hang":
                    receiver._released.wait(60)
                    answer = 200
                try:
                    self.send_response(int(answer))
                    if 300 <= int(answer) < 400:
                        self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender gave up (timeout) or was killed meanwhile

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook-receiver", daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    def release(self) -> None:
        """Let hanging requests answer (200)."""
        self._released.set()

    def events(self) -> list[str]:
        with self._lock:
            return [item.json["event"] for item in self.received]
