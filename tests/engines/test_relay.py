"""The provider relay (engines/relay.py, R-SB8, R-SB9) against local HTTP servers: what it lets
through, what it refuses, how it streams, and the tokens it counts for each model API."""

from __future__ import annotations

import gzip
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from engines import relay as relay_module
from engines.provider_api import ANTHROPIC_MESSAGES, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES, ProviderApi
from engines.relay import ProviderRelay, RelayLedger, SpendLimits
from tests.support.scripted_model_server import ScriptedModelServer

PLACEHOLDER = "skillrunner-placeholder-00112233445566778899aabbccddeeff"
REAL_KEY = "sk-operator-real-key-5150"
pytestmark = pytest.mark.timeout(60)


class Relay:
    """A relay on a loopback port in front of `upstream`, and a client speaking to it."""

    def __init__(self, upstream: str, api: ProviderApi, ledger: RelayLedger):
        listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        self.ledger = ledger
        self.relay = ProviderRelay(listener, upstream, api, PLACEHOLDER, REAL_KEY, ledger)
        self.key_header = {api.key_header: api.key_prefix + PLACEHOLDER}
        self.client = httpx.Client(base_url=self.url, timeout=20)

    def post(self, path: str, body: object, headers: dict[str, str] | None = None, **kwargs) -> httpx.Response:
        return self.client.post(path, json=body, headers={**self.key_header, **(headers or {})}, **kwargs)

    def close(self) -> None:
        self.client.close()
        self.relay.close()


@pytest.fixture
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer([{"text": "hello there"}]) as server:
        yield server


@pytest.fixture
def relay_to(model_server):
    made: list[Relay] = []

    def make(api: ProviderApi, upstream: str | None = None, limits: SpendLimits | None = None) -> Relay:
        relay = Relay(upstream or model_server.url, api, RelayLedger(limits or SpendLimits()))
        made.append(relay)
        return relay

    yield make
    for relay in made:
        relay.close()


def _chat(stream: bool) -> dict:
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


def _responses() -> dict:
    return {"model": "m", "stream": True, "input": [{"type": "message", "role": "user", "content": "hi"}]}


def _anthropic() -> dict:
    return {"model": "m", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _gemini() -> dict:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


# ---- what passes, with the key where the provider reads it ------------------------------------


@pytest.mark.parametrize(
    "api,path,body,usage_of",
    [
        (OPENAI_RESPONSES, "/v1/responses", _responses(), lambda u: u["input_tokens"] + u["output_tokens"]),
        (OPENAI_CHAT, "/v1/chat/completions", _chat(True), lambda u: u["prompt_tokens"] + u["completion_tokens"]),
        (OPENAI_CHAT, "/v1/chat/completions", _chat(False), lambda u: u["prompt_tokens"] + u["completion_tokens"]),
        (ANTHROPIC_MESSAGES, "/v1/messages?beta=true", _anthropic(), None),
        (GEMINI, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", _gemini(), None),
        (GEMINI, "/v1beta/models/gemini-2.5-flash:generateContent", _gemini(), None),
    ],
    ids=["responses", "chat-stream", "chat", "anthropic", "gemini-stream", "gemini"],
)
def test_a_model_call_reaches_the_provider_with_the_real_key_and_its_tokens_are_counted(
    relay_to, model_server, api, path, body, usage_of
):
    base = "/v1" if api in (OPENAI_RESPONSES, OPENAI_CHAT) else ""
    relay = relay_to(api, model_server.url + base)
    response = relay.post(path, body)
    assert response.status_code == 200, response.text
    [seen] = model_server.requests
    assert seen.headers[api.key_header] == api.key_prefix + REAL_KEY
    assert PLACEHOLDER not in json.dumps(seen.headers)
    expected = _reported_tokens(response.text)
    assert expected > 0
    assert relay.ledger.turn_tokens == expected


def _reported_tokens(text: str) -> int:
    """The tokens the scripted server reported, read independently of the relay: the largest
    total any document of the response gives (streams report running totals)."""
    documents = []
    for line in text.splitlines():
        line = line.removeprefix("data:").strip()
        if line.startswith("{"):
            documents.append(json.loads(line))
    if not documents and text.strip().startswith("{"):
        documents = [json.loads(text)]
    totals = [0]
    prompt = 0
    for doc in documents:
        usage = doc.get("usage") or (doc.get("response") or {}).get("usage") or (doc.get("message") or {}).get("usage")
        meta = doc.get("usageMetadata")
        if meta:
            totals.append(meta["totalTokenCount"])
        elif usage and "prompt_tokens" in usage:
            totals.append(usage["prompt_tokens"] + usage["completion_tokens"])
        elif usage and doc.get("type") == "message_start":
            prompt = usage["input_tokens"]
            totals.append(prompt + usage["output_tokens"])
        elif usage and doc.get("type") == "message_delta":
            totals.append(prompt + usage["output_tokens"])
        elif usage and "input_tokens" in usage:
            totals.append(usage["input_tokens"] + usage["output_tokens"])
    return max(totals)


def test_a_chat_stream_is_made_to_report_its_usage(relay_to, model_server):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1")
    response = relay.post("/v1/chat/completions", _chat(True))
    assert response.status_code == 200
    assert model_server.requests[0].body["stream_options"] == {"include_usage": True}
    assert relay.ledger.turn_tokens > 0


def test_a_gzipped_request_body_is_read_and_passes(relay_to, model_server):
    relay = relay_to(OPENAI_RESPONSES, model_server.url + "/v1")
    body = gzip.compress(json.dumps(_responses()).encode())
    headers = {**relay.key_header, "content-type": "application/json", "content-encoding": "gzip"}
    response = relay.client.post("/v1/responses", content=body, headers=headers)
    assert response.status_code == 200, response.text


def test_two_calls_share_one_connection(relay_to, model_server):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1")
    with socket.create_connection(("127.0.0.1", int(relay.url.rsplit(":", 1)[1]))) as sock:
        body = json.dumps(_chat(False)).encode()
        request = (
            (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {PLACEHOLDER}\r\n"
                f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                f"{len(body):x}\r\n"
            ).encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
        for _ in range(2):
            sock.sendall(request)
            assert b'"chat.completion"' in _read_response(sock)
    assert len(model_server.requests) == 2


def _read_response(sock: socket.socket) -> bytes:
    """One whole HTTP response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


# ---- what is refused, and recorded -------------------------------------------------------------


@pytest.mark.parametrize(
    "where,path,headers,body",
    [
        ("path", f"/v1/reflect/{PLACEHOLDER}", {}, _chat(False)),
        ("escaped path", "/v1/reflect/" + PLACEHOLDER.replace("-", "%2D"), {}, _chat(False)),
        ("query", f"/v1/chat/completions?echo={PLACEHOLDER}", {}, _chat(False)),
        ("header", "/v1/chat/completions", {"x-echo": PLACEHOLDER}, _chat(False)),
        ("body", "/v1/chat/completions", {}, {**_chat(False), "user": PLACEHOLDER}),
    ],
)
def test_the_key_anywhere_but_its_header_is_refused_and_recorded(relay_to, model_server, where, path, headers, body):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1")
    response = relay.post(path, body, headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "RELAY_KEY_OUTSIDE_KEY_HEADER"
    assert model_server.requests == []  # nothing left the machine
    [refusal] = relay.ledger.take()[1]
    assert refusal.reason == "RELAY_KEY_OUTSIDE_KEY_HEADER"
    assert PLACEHOLDER not in refusal.path and REAL_KEY not in response.text


def test_the_key_in_a_gzipped_body_is_refused(relay_to, model_server):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1")
    body = gzip.compress(json.dumps({**_chat(False), "user": PLACEHOLDER}).encode())
    headers = {**relay.key_header, "content-type": "application/json", "content-encoding": "gzip"}
    response = relay.client.post("/v1/chat/completions", content=body, headers=headers)
    assert response.status_code == 403 and model_server.requests == []


@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/v1/files"),
        ("GET", "/v1/organization/api_keys"),
        ("DELETE", "/v1/models/m"),
        ("POST", "/v1/chat/completions/../../files"),
        ("POST", "/v1//chat/completions"),
        ("POST", "/other/chat/completions"),
    ],
)
def test_a_call_outside_the_engines_model_routes_is_refused_and_recorded(relay_to, model_server, method, path):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1")
    request = relay.client.build_request(method, path, json=_chat(False), headers=relay.key_header)
    request.url = request.url.copy_with(raw_path=path.encode())  # as sent, dot segments included
    response = relay.client.send(request)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "RELAY_ROUTE_NOT_ALLOWED"
    assert model_server.requests == []
    assert [r.reason for r in relay.ledger.take()[1]] == ["RELAY_ROUTE_NOT_ALLOWED"]


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer someone-elses"}], ids=["none", "wrong"])
def test_a_call_without_this_relays_placeholder_is_refused(relay_to, model_server, headers):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1")
    response = relay.client.post("/v1/chat/completions", json=_chat(False), headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "RELAY_KEY_HEADER_INVALID"
    assert model_server.requests == []


def test_a_malformed_request_gets_a_400(relay_to):
    relay = relay_to(OPENAI_CHAT)
    with socket.create_connection(("127.0.0.1", int(relay.url.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 400")


# ---- spend limits ---------------------------------------------------------------------------


def test_past_the_run_budget_further_calls_are_refused(relay_to, model_server):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1", SpendLimits(run_max_tokens=5))
    assert relay.post("/v1/chat/completions", _chat(False)).status_code == 200  # it had budget left
    exceeded = relay.ledger.exceeded
    assert exceeded is not None and exceeded.which == "run" and exceeded.limit == 5 and exceeded.used > 5
    refused = relay.post("/v1/chat/completions", _chat(False))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "BUDGET_EXCEEDED"
    assert len(model_server.requests) == 1
    assert relay.ledger.take()[1] == []  # a spent budget is not a security event


def test_the_users_spending_elsewhere_counts(relay_to, model_server):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1", SpendLimits(user_max_tokens_per_day=1000))
    relay.ledger.set_spent(run_spent=0, user_spent_today=1000)  # the user's other runs spent it
    refused = relay.post("/v1/chat/completions", _chat(False))
    assert refused.status_code == 403
    assert relay.ledger.exceeded is not None and relay.ledger.exceeded.which == "user_day"
    assert model_server.requests == []


def test_model_calls_per_minute_are_capped(relay_to, model_server):
    relay = relay_to(OPENAI_CHAT, model_server.url + "/v1", SpendLimits(max_calls_per_minute=2))
    statuses = [relay.post("/v1/chat/completions", _chat(False)).status_code for _ in range(2)]
    refused = relay.post("/v1/chat/completions", _chat(False))
    assert statuses == [200, 200]
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
    assert relay.ledger.exceeded is None


def test_ledger_take_and_restore_keep_the_count():
    ledger = RelayLedger(SpendLimits(run_max_tokens=100), run_spent=10)
    ledger.charge(50)
    tokens, _ = ledger.take()
    assert tokens == 50
    ledger.restore(tokens, [])  # not recorded: counted again next time
    assert ledger.take()[0] == 50
    ledger.set_spent(run_spent=60, user_spent_today=60)
    ledger.charge(41)
    assert ledger.exceeded is not None and ledger.exceeded.used == 101


# ---- streams, slow and cut-off providers ------------------------------------------------------


class RawProvider:
    """A provider answering each connection with `chunks`, pausing `pause` s before each, then
    (unless `cut`) ending the chunked body."""

    def __init__(self, chunks: list[bytes], pause: float = 0.0, cut: bool = False):
        self.chunks, self.pause, self.cut = chunks, pause, cut
        self.sent_at: list[float] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for chunk in self.chunks:
                time.sleep(self.pause)
                self.sent_at.append(time.monotonic())
                conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            if not self.cut:
                conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self._listener.close()


def _chat_event(document: dict) -> bytes:
    return b"data: " + json.dumps(document).encode() + b"\n\n"


def test_a_stream_passes_as_it_comes(relay_to):
    chunks = [_chat_event({"choices": [{"delta": {"content": "a"}}]}) for _ in range(3)]
    provider = RawProvider(chunks, pause=0.5)
    relay = relay_to(OPENAI_CHAT, provider.url)
    received_at = []
    with relay.client.stream("POST", "/v1/chat/completions", json=_chat(True), headers=relay.key_header) as response:
        for _ in response.iter_raw():
            received_at.append(time.monotonic())
    provider.close()
    assert len(received_at) >= 3
    assert received_at[0] < provider.sent_at[-1]  # the first event arrived before the last was sent


def test_a_provider_that_closes_early_ends_the_answer_and_what_it_reported_counts(relay_to):
    usage = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    provider = RawProvider([_chat_event(usage)], cut=True)
    relay = relay_to(OPENAI_CHAT, provider.url)
    with pytest.raises(httpx.RemoteProtocolError):
        with relay.client.stream("POST", "/v1/chat/completions", json=_chat(True), headers=relay.key_header) as resp:
            for _ in resp.iter_raw():
                pass
    provider.close()
    deadline = time.monotonic() + 5
    while relay.ledger.turn_tokens == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert relay.ledger.turn_tokens == 10


def test_an_unreachable_provider_is_a_502(relay_to):
    unused = socket.create_server(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()
    relay = relay_to(OPENAI_CHAT, f"http://127.0.0.1:{port}/v1")
    response = relay.post("/v1/chat/completions", _chat(False))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "RELAY_PROVIDER_UNREACHABLE"


@pytest.fixture
def counted_trust_store_loads(monkeypatch) -> Iterator[list[int]]:
    """This process's provider client forgotten for the test (and the one before it restored),
    and a list that grows by one at each load of the system's trust store."""
    loads: list[int] = []
    real = ssl.SSLContext.load_default_certs
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", lambda *args: loads.append(1) or real(*args))
    monkeypatch.setattr(relay_module, "_client", None)
    yield loads
    if relay_module._client is not None:
        relay_module._client.close()


def test_the_relays_of_a_process_share_one_client_built_at_the_first_model_call(
    relay_to, model_server, counted_trust_store_loads
):
    """A turn opens a relay; a client of its own loaded the trust store (about 20 ms) each time."""
    relays = [relay_to(OPENAI_CHAT, model_server.url + "/v1") for _ in range(3)]
    assert counted_trust_store_loads == []  # a turn that calls no model loads nothing
    for relay in relays:
        assert relay.post("/v1/chat/completions", _chat(False)).status_code == 200
    assert len(counted_trust_store_loads) == 1


def test_slots_making_their_first_model_calls_at_once_build_one_client(counted_trust_store_loads, monkeypatch):
    """The first turns of a burst start together: each built a client of its own."""
    counted_load = ssl.SSLContext.load_default_certs

    def slow_load(*args):
        time.sleep(0.05)  # long enough for every thread to arrive meanwhile
        return counted_load(*args)

    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", slow_load)
    gate = threading.Barrier(8)
    built: list[httpx.Client] = []

    def first_call() -> None:
        gate.wait()
        built.append(relay_module.provider_client())

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(built) == 8 and all(client is built[0] for client in built)
    assert len(counted_trust_store_loads) == 1


def test_a_forked_child_builds_a_client_of_its_own(counted_trust_store_loads):
    """The task process is forked: it must not share its parent's connections."""
    parent_client = relay_module.provider_client()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer and leave at once, whatever happens
        try:
            os.write(write_end, b"own" if relay_module.provider_client() is not parent_client else b"shared")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"own"
    assert relay_module.provider_client() is parent_client


class _KeepAliveProvider(ThreadingHTTPServer):
    """A provider on loopback answering every POST with a chat completion over HTTP/1.1 keep-alive,
    noting the client's address (one per TCP connection) of each request."""

    def __init__(self) -> None:
        self.peers: list[tuple[str, int]] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                provider.peers.append(self.client_address)
                body = json.dumps({"object": "chat.completion", "choices": [], "usage": {}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_the_turns_of_a_process_reuse_the_providers_connection(relay_to, counted_trust_store_loads):
    provider = _KeepAliveProvider()
    try:
        for _ in range(3):  # three turns, one after the other, each with its relay
            relay = relay_to(OPENAI_CHAT, provider.url)
            assert relay.post("/v1/chat/completions", _chat(False)).status_code == 200
            relay.close()
    finally:
        provider.shutdown()
        provider.server_close()
    assert len(provider.peers) == 3
    assert len(set(provider.peers)) == 1
