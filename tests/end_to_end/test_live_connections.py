"""Live connections against a real daphne (R-FS2, R-FS3): websockets and event streams share one
cap per user, and revoking a token or signing out closes what was opened with it, whether the
revocation comes from the web process itself or from another process (`manage.py shell` here).

Runs on the embedded default and, with DATABASE_URL and REDIS_URL, on PostgreSQL + Redis.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from socket import create_connection

import httpx
import pytest

from tests.support.fake_codex import FakeCodex
from tests.support.service_processes import ServiceProcesses
from tests.support.wsclient import Closed, WebSocket

pytestmark = [pytest.mark.timeout(150)]

CAP = 3
PASSWORD = "carol-password-123"


class Service:
    def __init__(self, live: ServiceProcesses):
        self.live = live
        self.token = live.token("alice")
        self.run = self.start_waiting_run(self.token)

    def start_waiting_run(self, token: str) -> str:
        request_id = self.live.start_trip(token)
        self.live.wait_for_status(token, request_id, {"waiting_user"})
        return request_id

    def socket(self, headers: dict[str, str], path: str | None = None) -> WebSocket:
        return WebSocket(self.live.port, path or f"/ws/runs/{self.run}/", headers)

    def stream(self, client: httpx.Client, token: str):
        return client.stream("GET", f"/v1/jobs/{self.run}/events", headers={"Authorization": f"Token {token}"})

    def revoke(self, token: str) -> None:
        """Revoke through the service layer in another process, as an operator's script would."""
        lookup = token[3:11]
        self.live.manage(
            "shell",
            "-c",
            "from accounts.models import ApiToken\n"
            "from accounts.services import revoke_tokens\n"
            f"assert revoke_tokens(ApiToken.objects.filter(lookup={lookup!r})) == 1\n",
        )


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("live-connections")
    (root / "engine").mkdir()
    engine = FakeCodex(root / "engine", root / "data")
    engine.script({"message": "Where to?"})  # every run asks and then waits
    live = ServiceProcesses(
        root / "data",
        env={"SKILLRUNNER_CODEX_BIN": str(engine.binary), "SKILLRUNNER_USER_MAX_STREAMS": str(CAP)},
    )
    try:
        live.start()
        live.manage(
            "shell",
            "-c",
            f"from django.contrib.auth import get_user_model\n"
            f"get_user_model().objects.create_user('carol', password={PASSWORD!r})\n",
        )
        yield Service(live)
    finally:
        live.stop()


def token_header(token: str) -> dict[str, str]:
    return {"Authorization": f"Token {token}"}


def opened(socket: WebSocket) -> WebSocket:
    assert socket.recv()["type"] in ("snapshot", "inbox")
    return socket


def closing(socket: WebSocket) -> tuple[list[dict], int | None]:
    """What the server still sends, and its close code."""
    messages = []
    try:
        while True:
            messages.append(socket.recv(timeout=10))
    except Closed as closed:
        return messages, closed.code


def still_open(socket: WebSocket, quiet_seconds: float = 1.0) -> bool:
    """The socket neither closes nor errs: it only replays the run's events, then stays quiet."""
    for _ in range(100):
        try:
            message = socket.recv(timeout=quiet_seconds)
        except Closed:
            return False
        except TimeoutError:
            socket.close()
            return True
        if message["type"] != "event":
            return False
    return False


def sse_lines(response: httpx.Response) -> list[str]:
    """The rest of an event stream, until the server ends it (httpx's read timeout bounds each wait)."""
    return list(response.iter_lines())


def test_websockets_and_streams_share_the_cap(service):
    token = service.token
    with httpx.Client(base_url=service.live.url, timeout=10) as client:
        with service.stream(client, token) as stream:
            assert stream.status_code == 200
            sockets = [
                opened(service.socket(token_header(token))),
                opened(service.socket(token_header(token), "/ws/inbox/")),
            ]
            refused = service.socket(token_header(token))
            messages, code = closing(refused)
            assert code == 4429
            assert [(m["type"], m["code"], m["limit"]) for m in messages] == [("error", "TOO_MANY_STREAMS", CAP)]
            over = client.get(f"/v1/jobs/{service.run}/events", headers=token_header(token))
            assert over.status_code == 429
            assert over.json()["detail"]["code"] == "TOO_MANY_STREAMS"
        # The stream's place is given back once its client goes: a new socket fits again.
        service.live.wait_until(
            lambda: _accepted(service, token), 10, "the closed stream's place to be given back", interval=0.2
        )
    for socket in sockets:
        socket.close()


def _accepted(service, token) -> bool:
    socket = service.socket(token_header(token))
    try:
        return socket.recv()["type"] == "snapshot"
    except Closed:
        return False
    finally:
        socket.close()


def test_revoking_a_token_closes_its_socket_and_stream(service):
    doomed = service.live.token("alice")
    kept = opened(service.socket(token_header(service.token)))
    with httpx.Client(base_url=service.live.url, timeout=10) as client:
        with service.stream(client, doomed) as stream:
            assert stream.status_code == 200
            socket = opened(service.socket(token_header(doomed)))
            service.revoke(doomed)
            messages, code = closing(socket)
            lines = sse_lines(stream)
    assert code == 4401
    assert [(m["type"], m["code"]) for m in messages if m["type"] == "error"] == [("error", "NOT_AUTHENTICATED")]
    assert "event: error" in lines
    error = json.loads(lines[lines.index("event: error") + 1].removeprefix("data: "))
    assert error["code"] == "NOT_AUTHENTICATED"
    assert still_open(kept)  # another token's socket


class Browser:
    """A browser of `live`: its cookies, and forms submitted with the CSRF token of their page."""

    def __init__(self, live: ServiceProcesses):
        self.live = live
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def post_form(self, page: str, action: str, fields: dict[str, str]) -> int:
        text = self.opener.open(self.live.url + page, timeout=10).read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', text).group(1)
        body = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": csrf}).encode()
        return self.opener.open(urllib.request.Request(self.live.url + action, data=body), timeout=10).status

    def log_in(self, username: str, password: str) -> dict[str, str]:
        """Signs in; the headers of a socket or stream of this browser session."""
        self.post_form("/accounts/login/", "/accounts/login/", {"username": username, "password": password})
        cookie = next(c.value for c in self.jar if c.name == "sessionid")
        return {"Cookie": f"sessionid={cookie}", "Origin": self.live.url}


def test_signing_out_closes_that_sessions_sockets(service):
    live = service.live
    run = service.start_waiting_run(live.token("carol"))
    browser = Browser(live)
    headers = browser.log_in("carol", PASSWORD)
    signed_out = [opened(service.socket(headers, f"/ws/runs/{run}/")), opened(service.socket(headers, "/ws/inbox/"))]
    kept = opened(service.socket(token_header(service.token)))  # alice's socket is none of this

    assert browser.post_form("/", "/accounts/logout/", {}) == 200  # redirected to the login page
    assert [closing(socket)[1] for socket in signed_out] == [4401, 4401]
    assert still_open(kept)


def test_changepassword_closes_the_users_browser_sockets_and_streams(service):
    """`manage.py changepassword` in another process: the socket of one of dave's browser sessions
    and the event stream of the other close, his token's socket stays (CAP connections in all)."""
    live = service.live
    live.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        f"get_user_model().objects.create_user('dave', password={PASSWORD!r})\n",
    )
    token = live.token("dave")
    run = service.start_waiting_run(token)
    first, second = (Browser(live).log_in("dave", PASSWORD) for _ in range(2))
    socket = opened(service.socket(first, "/ws/inbox/"))
    kept = opened(service.socket(token_header(token), f"/ws/runs/{run}/"))
    with httpx.Client(base_url=live.url, timeout=10) as client:
        with client.stream("GET", f"/v1/jobs/{run}/events", headers=second) as stream:
            assert stream.status_code == 200
            new_password = "dave-new-password-456"
            live.manage("changepassword", "dave", stdin=f"{new_password}\n{new_password}\n")
            _, code = closing(socket)
            lines = sse_lines(stream)
    assert code == 4401
    error = json.loads(lines[lines.index("event: error") + 1].removeprefix("data: "))
    assert error["code"] == "NOT_AUTHENTICATED"
    assert still_open(kept)


def test_an_idle_socket_stays_open_and_the_web_process_reads_its_wake_ups_without_errors(service):
    """With Redis: redis-py stops reading after 5 s by default, and channels-redis blocks up to 5 s
    waiting for a message, so every few seconds an idle web process's read of the layer failed, and
    the socket that had started that read closed (1011)."""
    socket = opened(service.socket(token_header(service.token)))
    assert still_open(socket, quiet_seconds=12)
    web_log = service.live.log("web")
    assert "Timeout reading" not in web_log and "could not read the channel layer" not in web_log


def test_open_streams_leave_the_database_pool_to_requests(tmp_path):
    """An open event stream holds none of the web process's pooled PostgreSQL connections: with a
    pool of three, six streams stay open and a status GET is answered beside them. Each stream held
    the connection its view had used until it ended, so the pool's size capped the open streams
    (503 past it)."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("the web's connection pool is PostgreSQL's")
    (tmp_path / "engine").mkdir()
    engine = FakeCodex(tmp_path / "engine", tmp_path / "data")
    engine.script({"message": "Where to?"})
    live = ServiceProcesses(
        tmp_path / "data",
        env={"SKILLRUNNER_CODEX_BIN": str(engine.binary), "SKILLRUNNER_WEB_DB_CONNECTIONS": "3"},
    )
    streams = []
    try:
        live.start()
        token = live.token("alice")
        run = live.start_trip(token)
        live.wait_for_status(token, run, {"waiting_user"})
        for _ in range(6):
            stream = create_connection(("127.0.0.1", live.port), timeout=10)
            streams.append(stream)
            stream.sendall(f"GET /v1/jobs/{run}/events HTTP/1.0\r\nAuthorization: Token {token}\r\n\r\n".encode())
            received = b""
            while b"\n\n" not in received.partition(b"\r\n\r\n")[2]:
                chunk = stream.recv(65536)
                assert chunk, received
                received += chunk
            assert received.startswith(b"HTTP/1.0 200"), received
        status, body = live.request("GET", f"/v1/jobs/{run}", token)
        assert status == 200 and body["status"] == "waiting_user"
    finally:
        for stream in streams:
            stream.close()
        live.stop()
