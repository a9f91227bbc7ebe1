"""What the provider relay (engines/relay.py, R-SB8) adds to one model call.

A small model answer (a Chat Completions document, as a non-streamed call gets it) from a local
provider on the loopback, called `calls` times over one kept-alive connection straight and as many
times through a relay in front of it, alternating, so both see the same machine. The relay's
share is the difference of the medians.

    .venv/bin/python -m bench.relay [--calls 500]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from engines.provider_api import OPENAI_CHAT
from engines.relay import ProviderRelay, RelayLedger, SpendLimits

PLACEHOLDER = "skillrunner-placeholder-bench"
ANSWER = json.dumps(
    {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }
).encode()
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}


class _Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a provider's API
    disable_nagle_algorithm = True  # its headers and body are two writes

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: Any) -> None:
        pass


def measure(calls: int) -> dict[str, Any]:
    provider = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{provider.server_address[1]}/v1"
    listener = socket.create_server(("127.0.0.1", 0))
    ledger = RelayLedger(SpendLimits())
    relay = ProviderRelay(listener, upstream, OPENAI_CHAT, PLACEHOLDER, "sk-bench", ledger)
    relayed_url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions"
    headers = {"authorization": "Bearer " + PLACEHOLDER}
    timings: dict[str, list[float]] = {"direct": [], "relayed": []}
    try:
        with httpx.Client() as direct, httpx.Client() as through:
            for index in range(calls + 20):  # the first 20 of each warm up
                for name, client, url in (
                    ("direct", direct, upstream + "/chat/completions"),
                    ("relayed", through, relayed_url),
                ):
                    began = time.perf_counter()
                    response = client.post(url, json=REQUEST, headers=headers)
                    elapsed = time.perf_counter() - began
                    if response.status_code != 200:
                        raise RuntimeError(f"{name} call answered {response.status_code}: {response.text[:200]}")
                    if index >= 20:
                        timings[name].append(elapsed * 1000)
    finally:
        relay.close()
        provider.shutdown()
    direct_ms, relayed_ms = statistics.median(timings["direct"]), statistics.median(timings["relayed"])
    return {
        "calls": calls,
        "direct_ms": round(direct_ms, 3),
        "relayed_ms": round(relayed_ms, 3),
        "added_ms": round(relayed_ms - direct_ms, 3),
        "tokens_counted": ledger.turn_tokens,
    }


def line(figures: dict[str, Any]) -> str:
    return (
        f"provider relay: {figures['added_ms']:.2f} ms added per model call, median of {figures['calls']} "
        f"({figures['direct_ms']:.2f} ms straight, {figures['relayed_ms']:.2f} ms through the relay; target < 2 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.relay", description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    print(line(measure(parser.parse_args().calls)))


if __name__ == "__main__":
    main()
