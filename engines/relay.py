"""The provider relay: an engine's only way to its model, and the only holder of the key (R-SB8, R-SB9).

The engine is given the relay's address as its base URL and a per-turn placeholder as its key.
Each request it sends is parsed as HTTP (h11) and checked before anything leaves the machine:

* the placeholder must be in the engine API's key header, exactly once, and nowhere else — not in
  the request line, the query, another header or the body (gzip and deflate bodies decoded);
* the method and path must be one of the model calls that API makes (engines.provider_api);
* the run's spend limits and call rate must allow another call (RelayLedger).

A refused request gets a JSON 403 (429 for the rate) and, unless it is a spend refusal, is recorded
in the ledger as a security event. An allowed one goes to the provider through httpx with the
real key in that one header, and its response streams back as it arrives while the provider's own
usage fields in it are counted. Nothing but the key header is ever rewritten, so the key cannot
come back through an echoed path, query or header.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes, urlsplit

import h11
import httpx

from .provider_api import ProviderApi

MAX_HEAD_BYTES = 256 * 1024
MAX_REQUEST_BODY_BYTES = 64 * 1024 * 1024
# A response's usage is read from at most this much of it (a non-streamed body is parsed whole).
_MAX_METERED_BYTES = 64 * 1024 * 1024
_RECV_BYTES = 65536
_HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authorization",
    b"proxy-authenticate",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"host",
    b"content-length",
}

# Security-event reasons (recorded on the run) and the other refusals' codes.
KEY_HEADER_INVALID = "RELAY_KEY_HEADER_INVALID"
PLACEHOLDER_ELSEWHERE = "RELAY_KEY_OUTSIDE_KEY_HEADER"
ROUTE_NOT_ALLOWED = "RELAY_ROUTE_NOT_ALLOWED"
BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
RATE_LIMITED = "RELAY_RATE_LIMITED"


@dataclass(frozen=True)
class SpendLimits:
    """A run's limits at the relay; None is no limit."""

    run_max_tokens: int | None = None
    user_max_tokens_per_day: int | None = None
    max_calls_per_minute: int | None = None


@dataclass(frozen=True)
class BudgetExceeded:
    which: str  # "run" or "user_day"
    used: int
    limit: int

    code = BUDGET_EXCEEDED

    @property
    def message(self) -> str:
        scope = "the run's token budget" if self.which == "run" else "the user's daily token budget"
        return f"{scope} is spent: {self.used} tokens used of {self.limit}"

    def details(self) -> dict[str, int | str]:
        return {"which": self.which, "used": self.used, "limit": self.limit}


@dataclass(frozen=True)
class RelayRefusal:
    """A request the relay refused as an attack or a misuse (a security event of the run)."""

    reason: str
    method: str
    path: str  # the placeholder replaced by "<key>"
    detail: str
    at: float = field(default_factory=time.time)


class RelayLedger:
    """What one run's relay let through, counted and refused; shared between the relay's threads
    and the caller, who records it (take) and tells it what the run and its user have spent,
    other runs of the user included (set_spent)."""

    def __init__(self, limits: SpendLimits = SpendLimits(), run_spent: int = 0, user_spent_today: int = 0):
        self.limits = limits
        self._lock = threading.Lock()
        self._run_spent = run_spent
        self._user_spent = user_spent_today
        self._untaken = 0  # counted here, not yet taken by the caller
        self._turn_tokens = 0
        self._calls: deque[float] = deque()
        self._refusals: list[RelayRefusal] = []
        self.exceeded: BudgetExceeded | None = None

    @property
    def turn_tokens(self) -> int:
        """Tokens counted since this ledger was made."""
        return self._turn_tokens

    def admit(self, now: float | None = None) -> BudgetExceeded | float | None:
        """None lets a model call through; a BudgetExceeded refuses it for good (and ends the
        turn); a number refuses it for that many seconds (the call rate)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self.exceeded is None:
                self.exceeded = self._over(strictly=False)
            if self.exceeded is not None:
                return self.exceeded
            per_minute = self.limits.max_calls_per_minute
            if per_minute:
                while self._calls and self._calls[0] <= now - 60:
                    self._calls.popleft()
                if len(self._calls) >= per_minute:
                    return self._calls[0] + 60 - now
                self._calls.append(now)
            return None

    def charge(self, tokens: int) -> None:
        with self._lock:
            self._untaken += tokens
            self._turn_tokens += tokens
            if self.exceeded is None:
                self.exceeded = self._over(strictly=True)

    def refuse(self, refusal: RelayRefusal) -> None:
        with self._lock:
            self._refusals.append(refusal)

    def take(self) -> tuple[int, list[RelayRefusal]]:
        """The tokens counted and the refusals made since the last call, for the caller to
        record; they count as spent until set_spent says how much is, or restore gives them back."""
        with self._lock:
            tokens, self._untaken = self._untaken, 0
            self._run_spent += tokens
            self._user_spent += tokens
            refusals, self._refusals = self._refusals, []
            return tokens, refusals

    def restore(self, tokens: int, refusals: list[RelayRefusal]) -> None:
        """What take() gave, not recorded after all (the database was away): taken again next time."""
        with self._lock:
            self._run_spent -= tokens
            self._user_spent -= tokens
            self._untaken += tokens
            self._refusals = refusals + self._refusals

    def set_spent(self, run_spent: int, user_spent_today: int) -> None:
        """What the run and its user have spent as recorded, everything taken so far included
        (other runs of the user count too)."""
        with self._lock:
            self._run_spent, self._user_spent = run_spent, user_spent_today
            if self.exceeded is None:
                self.exceeded = self._over(strictly=True)

    def _over(self, *, strictly: bool) -> BudgetExceeded | None:
        """Past a limit (strictly), or at it (no call may start)."""
        for which, used, limit in (
            ("run", self._run_spent + self._untaken, self.limits.run_max_tokens),
            ("user_day", self._user_spent + self._untaken, self.limits.user_max_tokens_per_day),
        ):
            if limit is not None and (used > limit or (not strictly and used >= limit)):
                return BudgetExceeded(which, used, limit)
        return None


_BAD_REQUEST_BODY = json.dumps(
    {"error": {"code": "RELAY_BAD_REQUEST", "type": "skillrunner_relay", "message": "malformed HTTP request"}}
).encode()
_BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n"
    + f"content-length: {len(_BAD_REQUEST_BODY)}\r\n\r\n".encode()
    + _BAD_REQUEST_BODY
)


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str, headers: Iterable[tuple[bytes, bytes]] = ()):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, list(headers)


_client: httpx.Client | None = None
_client_lock = threading.Lock()


def provider_client() -> httpx.Client:
    """The one client this process's relays forward through, built at the first model call.

    Its TLS context holds the system's trust store, as the CLIs use it (about 20 ms to load).
    Each relay used to build a client as its turn began, and on a fresh service the first turns
    of a burst, starting together, each loaded the store (three times in one burst; the first
    also imported httpcore, 11 ms), and the task process kept about 5 MiB more after the bench's
    burst, whose engine calls no model. Shared, the client also keeps the provider's connections
    alive from one turn to the next. httpx's client can be shared between threads; its pool is
    unbounded, as the relays' own pools together were."""
    global _client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(
                verify=ssl.create_default_context(),
                trust_env=False,  # no proxy, netrc or certificate settings of the service's environment
                timeout=httpx.Timeout(30.0, read=None),  # a model may think for minutes between chunks
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
                follow_redirects=False,
            )
        return _client


def _forget_client_in_child() -> None:
    # A forked child must not share the parent's connections, nor a lock held at the fork.
    global _client, _client_lock
    _client, _client_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_client_in_child)


class ProviderRelay:
    """Serves the engine's model calls on ``listener`` (a Unix or loopback TCP socket, listening)."""

    def __init__(
        self,
        listener: socket.socket,
        provider_url: str,
        api: ProviderApi,
        placeholder: str,
        api_key: str | None,
        ledger: RelayLedger,
    ):
        upstream = urlsplit(provider_url)
        self._origin = f"{upstream.scheme}://{upstream.netloc}"
        self._base_path = upstream.path.rstrip("/")
        self._api = api
        self._placeholder = placeholder.encode()
        self._expected_key_value = (api.key_prefix + placeholder).encode()
        self._key_value = (api.key_prefix + api_key).encode() if api_key else None
        self.ledger = ledger
        self._listener = listener
        threading.Thread(target=self._accept, name="provider-relay", daemon=True).start()

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if client.family != socket.AF_UNIX:
                # An answer's head and body are separate writes: without this, the second waits for
                # the engine's delayed acknowledgement of the first (40 ms a call).
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(client,), name="provider-relay-conn", daemon=True).start()

    # ---- one connection: requests one after the other (keep-alive) ---------------------------

    def _serve(self, sock: socket.socket) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                request = self._read_request(conn, sock)
                if request is None:
                    return
                head, body = request
                try:
                    self._forward(conn, sock, head, body)
                except _Refused as refused:
                    self._send_refusal(conn, sock, refused)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, OSError, httpx.HTTPError):
            return
        finally:
            sock.close()

    def _read_request(self, conn: h11.Connection, sock: socket.socket) -> tuple[h11.Request, bytes] | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                sock.sendall(_BAD_REQUEST)  # h11 sends nothing more on this connection
                return None
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:
                    sock.sendall(conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
                data = sock.recv(_RECV_BYTES)
                conn.receive_data(data)
                if not data and conn.their_state is h11.IDLE:
                    return None
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_REQUEST_BODY_BYTES:
                    self._send_refusal(conn, sock, _Refused(413, "RELAY_REQUEST_TOO_LARGE", "request body too large"))
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return head, bytes(body)
            else:  # ConnectionClosed, PAUSED
                return None

    # ---- checks and forwarding ---------------------------------------------------------------

    def _forward(self, conn: h11.Connection, sock: socket.socket, head: h11.Request, body: bytes) -> None:
        method = head.method.decode("ascii", "replace")
        target = head.target
        path = target.split(b"?", 1)[0].decode("latin-1")
        shown_path = target.replace(self._placeholder, b"<key>").decode("latin-1")[:300]

        def refuse(reason: str, message: str) -> _Refused:
            self.ledger.refuse(RelayRefusal(reason, method, shown_path, message))
            return _Refused(403, reason, message)

        headers: list[tuple[bytes, bytes]] = list(head.headers)
        key_headers = [value for name, value in headers if name == self._api.key_header.encode()]
        if key_headers != [self._expected_key_value]:
            raise refuse(KEY_HEADER_INVALID, f"the key must be sent once, in the {self._api.key_header} header")
        self._check_placeholder(target, headers, body, refuse)
        if not self._route_allowed(method, path):
            raise refuse(
                ROUTE_NOT_ALLOWED, f"{method} {shown_path.split('?', 1)[0]} is not a model call of this engine"
            )
        admitted = self.ledger.admit()
        if isinstance(admitted, BudgetExceeded):
            raise _Refused(403, BUDGET_EXCEEDED, admitted.message)
        if admitted is not None:
            wait = max(1, round(admitted))
            raise _Refused(
                429, RATE_LIMITED, "too many model calls this minute", [(b"retry-after", str(wait).encode())]
            )
        self._relay(conn, sock, method, target, headers, body)

    def _check_placeholder(
        self, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes, refuse: Callable[[str, str], _Refused]
    ) -> None:
        places: list[tuple[str, bytes | None]] = [
            ("the request line", target),
            ("the request line", unquote_to_bytes(target)),
        ]
        places += [
            (f"the {name.decode('latin-1')} header", value)
            for name, value in headers
            if name != self._api.key_header.encode()
        ]
        places += [("the body", _decoded(body, _header(headers, b"content-encoding")))]
        for where, value in places:
            if value is None:
                raise refuse(PLACEHOLDER_ELSEWHERE, "the request body's encoding is not supported")
            if self._placeholder in value:
                raise refuse(
                    PLACEHOLDER_ELSEWHERE,
                    f"the key may only be sent in the {self._api.key_header} header, not in {where}",
                )

    def _route_allowed(self, method: str, path: str) -> bool:
        # No dot segments, doubled slashes or escapes a provider could resolve to another route.
        if "%" in path or "\\" in path or "//" in path or any(part in (".", "..") for part in path.split("/")):
            return False
        if not path.startswith(self._base_path + "/"):
            return False
        return self._api.allows(method, path[len(self._base_path) :])

    def _relay(
        self,
        conn: h11.Connection,
        sock: socket.socket,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        outgoing = [
            (name, value)
            for name, value in headers
            if name not in _HOP_BY_HOP and name != self._api.key_header.encode()
        ]
        outgoing = [(name, value) for name, value in outgoing if name != b"accept-encoding"]
        outgoing.append((b"accept-encoding", b"identity"))  # the usage is read from what passes
        if self._key_value is not None:
            outgoing.append((self._api.key_header.encode(), self._key_value))
        if self._api.asks_stream_usage:
            outgoing, body = _asking_stream_usage(outgoing, body)
        client = provider_client()
        request = client.build_request(method, self._origin + target.decode("latin-1"), headers=outgoing, content=body)
        try:
            response = client.send(request, stream=True)
        except httpx.HTTPError as failed:
            raise _Refused(
                502, "RELAY_PROVIDER_UNREACHABLE", f"the provider could not be reached: {type(failed).__name__}"
            ) from failed
        meter = _UsageMeter(
            self._api, response.headers.get("content-type", ""), response.headers.get("content-encoding", "")
        )
        received, length = 0, -1
        try:
            kept = [(name, value) for name, value in response.headers.raw if name.lower() not in _HOP_BY_HOP]
            if "content-length" in response.headers:
                kept.append((b"content-length", response.headers["content-length"].encode()))
            sock.sendall(conn.send(h11.Response(status_code=response.status_code, headers=kept, reason=b"")) or b"")
            length = int(response.headers.get("content-length", -1))
            for chunk in response.iter_raw():
                meter.feed(chunk)
                received += len(chunk)
                if received == length:  # the last piece: counted before the engine has it all
                    self.ledger.charge(meter.tokens())
                sock.sendall(conn.send(h11.Data(data=chunk)) or b"")
        finally:
            response.close()
            if received != length:
                self.ledger.charge(meter.tokens())  # before the end of a chunked answer, or what came
        sock.sendall(conn.send(h11.EndOfMessage()) or b"")

    def _send_refusal(self, conn: h11.Connection, sock: socket.socket, refused: _Refused) -> None:
        if conn.our_state is not h11.SEND_RESPONSE:
            return
        body = json.dumps(
            {
                "error": {
                    "code": refused.code,
                    "type": "skillrunner_relay",
                    "message": f"skill runner relay: {refused.message}",
                }
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *refused.headers,
        ]
        sock.sendall(conn.send(h11.Response(status_code=refused.status, headers=headers)) or b"")
        sock.sendall(conn.send(h11.Data(data=body)) or b"")
        sock.sendall(conn.send(h11.EndOfMessage()) or b"")
        if conn.their_state is not h11.DONE:
            conn.send(h11.ConnectionClosed())  # the rest of their request is not read


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    return b", ".join(value for key, value in headers if key == name)


def _decoded(body: bytes, encoding: bytes) -> bytes | None:
    """The body as sent before its content encoding; None for an encoding not supported."""
    encoding = encoding.strip().lower()
    if encoding in (b"", b"identity"):
        return body
    if encoding in (b"gzip", b"x-gzip", b"deflate"):
        decoder = zlib.decompressobj(wbits=47)  # gzip or zlib framing, told by the header
        try:
            decoded = decoder.decompress(body, MAX_REQUEST_BODY_BYTES)
        except zlib.error:
            return None
        return None if decoder.unconsumed_tail else decoded  # past the cap: not read, not sent
    return None


def _asking_stream_usage(headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A streamed Chat Completions request made to report its usage (stream_options.include_usage)."""
    document = _json_object(_decoded(body, _header(headers, b"content-encoding")) or b"")
    if document is None or document.get("stream") is not True:
        return headers, body
    options = document.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return headers, body
    document["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return [(name, value) for name, value in headers if name != b"content-encoding"], json.dumps(document).encode()


def _json_object(data: bytes) -> dict | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class _UsageMeter:
    """Reads the tokens a response reports while it passes: each event of a stream (the latest
    input and output counts win: streams report running totals) or the whole document."""

    def __init__(self, api: ProviderApi, content_type: str, content_encoding: str):
        self._api = api
        self._streamed = content_type.split(";")[0].strip().lower() == "text/event-stream"
        encoding = content_encoding.strip().lower()
        self._decoder = zlib.decompressobj(wbits=47) if encoding in ("gzip", "x-gzip", "deflate") else None
        self._readable = encoding in ("", "identity") or self._decoder is not None
        self._pending = b""
        self._event: list[bytes] = []
        self._seen = 0
        self._input: int | None = None
        self._output: int | None = None

    def feed(self, chunk: bytes) -> None:
        if not self._readable or self._seen > _MAX_METERED_BYTES:
            return
        self._seen += len(chunk)
        if self._decoder is not None:
            try:
                chunk = self._decoder.decompress(chunk)
            except zlib.error:
                self._readable = False
                return
        self._pending += chunk
        if self._streamed:
            *lines, self._pending = self._pending.split(b"\n")
            for line in lines:
                self._stream_line(line.rstrip(b"\r"))

    def tokens(self) -> int:
        """The response's tokens, once it ended (or was cut off: what it reported so far)."""
        if self._readable and self._streamed:
            for line in (self._pending.rstrip(b"\r"), b""):  # a last event without its blank line
                self._stream_line(line)
        elif self._readable and self._pending:
            document = _json_object(self._pending)
            if document is not None:
                self._count(document)
        self._pending = b""
        return (self._input or 0) + (self._output or 0)

    def _stream_line(self, line: bytes) -> None:
        if line.startswith(b"data:"):
            self._event.append(line[5:].strip())
        elif not line and self._event:
            data, self._event = b"\n".join(self._event), []
            document = _json_object(data)
            if document is not None:
                self._count(document)

    def _count(self, document: dict) -> None:
        prompt, output = self._api.usage_of(document)
        if prompt is not None:
            self._input = prompt
        if output is not None:
            self._output = output
