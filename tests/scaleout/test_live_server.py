"""Security checks that only mean something against the real server (daphne + worker on PostgreSQL
and Redis, tests/scaleout/deployment.py): raw, unnormalised request paths; request bodies larger
than the limits; the run socket with real upgrade headers (token, cookie, Origin); what a real
engine process inherits from a real worker; what ends up in the server's log output.

The in-process tests (test client, WebsocketCommunicator) skip daphne's own request parsing and
the worker's real environment, which is where these can go wrong."""

from __future__ import annotations

import http.cookiejar
import json
import re
import socket
import urllib.parse
import urllib.request

import pytest

from tests.scaleout.deployment import Deployment
from tests.scaleout.fixtures import standard_scripts
from tests.scaleout.invariants import assert_logs_clean
from tests.support.wsclient import Closed, HandshakeRefused, WebSocket

pytestmark = [pytest.mark.scaleout, pytest.mark.timeout(120)]

UPLOAD_LIMIT = 256 * 1024
BOB_PRIVATE = "BOB-PRIVATE-ARTIFACT-4410"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    d = standard_scripts(
        Deployment(
            tmp_path_factory.mktemp("live-security"),
            webs=1,
            workers=1,
            env={"SKILLRUNNER_MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT)},
        )
    )
    try:
        d.start()
        d.engine.script(
            "haiku-writer",
            {
                "files": {"artifacts/haiku.md": BOB_PRIVATE},
                "message": json.dumps({"topic": "t", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}),
            },
        )
        d.bob_run = d.create("bob", "haiku-writer", input={"topic": "bob"})
        d.wait_status("bob", d.bob_run, {"succeeded"})
        standard_scripts(d)
        d.alice_run = d.create("alice", "haiku-writer", input={"topic": "alice"})
        d.wait_status("alice", d.alice_run, {"succeeded"})
        d.alice_waiting = d.create("alice", "trip-planner", mode="interactive")
        d.wait_status("alice", d.alice_waiting, {"waiting_user"})
        yield d
    finally:
        d.stop()


def raw_request(port: int, head: str, body: bytes = b"", *, read_timeout: float = 10) -> tuple[int | None, bytes]:
    """Send bytes exactly as given (no client-side path normalisation); (status, response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        sock.sendall(head.encode("latin-1") + body)
        data = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass
    match = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return (int(match.group(1)) if match else None), data


def test_raw_traversal_paths_on_the_real_server(live):
    token = live.tokens["alice"]
    rid, bob = live.alice_run, live.bob_run
    paths = [
        f"/v1/jobs/{rid}/artifacts/../../{bob}/artifacts/haiku.md",
        f"/v1/jobs/{rid}/artifacts/..%2f..%2f{bob}%2fartifacts%2fhaiku.md",
        f"/v1/jobs/{rid}/artifacts/%2e%2e/%2e%2e/{bob}/artifacts/haiku.md",
        f"/v1/jobs/{rid}/artifacts/%252e%252e%252f%252e%252e%252f{bob}%252fartifacts%252fhaiku.md",
        f"/v1/jobs/{rid}/artifacts/..\\..\\{bob}\\artifacts\\haiku.md",
        f"/v1/jobs/{rid}/artifacts/%2F{live.data_dir.as_posix().lstrip('/')}/runs/{bob}/artifacts/haiku.md",
        f"/v1/jobs/{rid}/artifacts//{live.data_dir.as_posix().lstrip('/')}/runs/{bob}/artifacts/haiku.md",
        f"/v1/jobs/{rid}/../{bob}/artifacts/artifacts/haiku.md",
        f"/v1/jobs/{rid}/%2e%2e/{bob}/artifacts/artifacts/haiku.md",
        "/static/../skillrunner/settings.py",
        "/static/%2e%2e/%2e%2e/manage.py",
        "/static/..%2f..%2fmanage.py",
    ]
    leaked = {}
    for path in paths:
        status, data = raw_request(
            live.web_ports[0],
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\nConnection: close\r\n\r\n",
        )
        if status is None or status == 200 or status >= 500 or BOB_PRIVATE.encode() in data or b"SECRET_KEY" in data:
            leaked[path] = (status, data[:160])
    assert leaked == {}
    # the control: the same client reads its own artifact fine
    status, data = raw_request(
        live.web_ports[0],
        f"GET /v1/jobs/{rid}/artifacts/artifacts/haiku.md HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\nConnection: close\r\n\r\n",
    )
    # Sent chunked: the key guard (R-SB10) knows the length it serves only once it has read the file.
    assert status == 200 and b"\r\nwaves fold\ninto the grey\nmorning\n\r\n" in data, data[-200:]


def test_oversized_body_is_refused_before_django_parses_it(live):
    """SPEC §8 413 on the real server, and no more than that: daphne (Twisted) has no body limit
    and receives the whole body before the application sees the request, so the 413
    REQUEST_TOO_LARGE comes once the body is in, decided on Content-Length before Django parses
    or stores any of it, credentials or not. Capping bodies while they arrive is the job of a
    reverse proxy in front (README, SKILLRUNNER_MAX_UPLOAD_BYTES)."""
    body = b"--x\r\n" + b"\0" * (UPLOAD_LIMIT + 1024)
    status, data = raw_request(
        live.web_ports[0],
        "POST /v1/skill-packages/install HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {len(body)}\r\n\r\n",
        body,
    )
    assert status == 413, data[:300]
    assert b'"code": "REQUEST_TOO_LARGE"' in data or b'"code":"REQUEST_TOO_LARGE"' in data, data[-300:]


@pytest.mark.parametrize(
    "path,content_type",
    [("/v1/jobs", "application/json"), ("/v1/skill-packages/install", "multipart/form-data; boundary=x")],
)
def test_chunked_bodies_do_not_bypass_the_limits(live, path, content_type):
    """Without a Content-Length the size check cannot look at a header; an oversized chunked body
    must still never be processed (no run created, no install, no 5xx)."""
    before = set(live.runs())
    payload = (
        json.dumps(
            {
                "skill_id": "haiku-writer",
                "engine": "codex",
                "input": {"topic": "chunked"},
                "parameter": {"pad": "x" * (3 * 1024 * 1024)},
            }
        ).encode()
        if "json" in content_type
        else b'--x\r\nContent-Disposition: form-data; name="file"; filename="a.zip"\r\n\r\n'
        + b"\0" * (2 * UPLOAD_LIMIT)
        + b"\r\n--x--\r\n"
    )
    chunks = (
        b"".join(
            f"{len(payload[i : i + 65536]):x}\r\n".encode() + payload[i : i + 65536] + b"\r\n"
            for i in range(0, len(payload), 65536)
        )
        + b"0\r\n\r\n"
    )
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {live.tokens['ops']}\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    status, data = raw_request(live.web_ports[0], head, chunks, read_timeout=20)
    assert status in (400, 411, 413), (status, data[:300])
    assert set(live.runs()) == before


def _login(live, username: str) -> str:
    """A real browser login (CSRF form); returns the session cookie value."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(live.url() + "/accounts/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode(
        {"username": username, "password": f"{username}-password-123", "csrfmiddlewaretoken": token}
    ).encode()
    opener.open(
        urllib.request.Request(
            live.url() + "/accounts/login/", data=form, headers={"Referer": live.url() + "/accounts/login/"}
        ),
        timeout=10,
    ).read()
    return next(c.value for c in jar if c.name == "sessionid")


def _socket_outcome(live, request_id: str, headers: dict[str, str], query: str = "") -> tuple[str, object]:
    try:
        socket_ = WebSocket(live.web_ports[0], f"/ws/runs/{request_id}/{query}", headers)
    except HandshakeRefused as refused:
        return "refused", refused.status
    try:
        first = socket_.recv(timeout=10)
        return "open", first["type"]
    except Closed as closed:
        return "closed", closed.code
    finally:
        socket_.close()


def test_run_socket_access_on_the_real_server(live):
    rid = live.alice_waiting
    alice, bob = live.tokens["alice"], live.tokens["bob"]
    cookie = _login(live, "alice")
    own_origin = f"http://127.0.0.1:{live.web_ports[0]}"
    outcomes = {
        "alice token": _socket_outcome(live, rid, {"Authorization": f"Token {alice}"}),
        "bob token": _socket_outcome(live, rid, {"Authorization": f"Token {bob}"}),
        "staff token": _socket_outcome(live, rid, {"Authorization": f"Token {live.tokens['ops']}"}),
        "no credentials": _socket_outcome(live, rid, {"Origin": own_origin}),
        "token in the URL": _socket_outcome(live, rid, {"Origin": own_origin}, f"?token={alice}"),
        "revoked-looking token": _socket_outcome(
            live, rid, {"Authorization": "Token sr_0000000000000000000000000000000"}
        ),
        "cookie, own origin": _socket_outcome(live, rid, {"Cookie": f"sessionid={cookie}", "Origin": own_origin}),
        "cookie, foreign origin": _socket_outcome(
            live, rid, {"Cookie": f"sessionid={cookie}", "Origin": "http://evil.example"}
        ),
        "cookie, look-alike origin": _socket_outcome(
            live, rid, {"Cookie": f"sessionid={cookie}", "Origin": "http://127.0.0.1.evil.example"}
        ),
        "cookie, no origin": _socket_outcome(live, rid, {"Cookie": f"sessionid={cookie}"}),
        "bob token, bob's own run": _socket_outcome(live, live.bob_run, {"Authorization": f"Token {bob}"}),
    }
    expected = {
        "alice token": ("open", "snapshot"),
        "bob token": ("closed", 4404),
        "staff token": ("open", "snapshot"),
        "no credentials": ("closed", 4401),
        "token in the URL": ("closed", 4401),
        "revoked-looking token": ("closed", 4401),
        "cookie, own origin": ("open", "snapshot"),
        "cookie, foreign origin": ("refused", 403),
        "cookie, look-alike origin": ("refused", 403),
        "cookie, no origin": ("refused", 403),
        "bob token, bob's own run": ("open", "snapshot"),
    }
    assert outcomes == expected


def test_bob_cannot_act_on_alices_run_through_the_real_server(live):
    rid = live.alice_waiting
    answers = {
        suffix: live.request(method, f"/v1/jobs/{rid}{suffix}", "bob", body)[0]
        for method, suffix, body in [
            ("GET", "", None),
            ("GET", "/interaction/pending", None),
            ("POST", "/interaction/reply", {"interaction_id": 1, "response": "hijacked"}),
            ("POST", "/cancel", {}),
            ("GET", "/events/history", None),
            ("GET", "/logs", None),
        ]
    }
    assert answers == {suffix: 404 for suffix in answers}
    assert live.status("alice", rid)["status"] == "waiting_user"


def test_engine_processes_of_a_real_worker_get_no_server_secrets(live):
    """R-EN5, R-SB8: the worker's environment holds SECRET_KEY, DATABASE_URL, REDIS_URL and every
    engine's key; a codex process gets none of those, its own key included (a placeholder the
    provider relay swaps)."""
    envs = live.engine.environments()
    assert envs, "the engine recorded no environment"
    server_only = {
        name: value
        for name, value in live.env.items()
        if name
        in (
            "SECRET_KEY",
            "DATABASE_URL",
            "REDIS_URL",
            "SKILLRUNNER_GEMINI_API_KEY",
            "SKILLRUNNER_CLAUDE_API_KEY",
            "SKILLRUNNER_IFLOW_API_KEY",
            "DJANGO_SETTINGS_MODULE",
            "SKILLRUNNER_QUEUE_NAME",
        )
    }
    secrets = live.secrets
    for env in envs:
        assert [name for name in server_only if name in env] == []
        assert [
            name
            for name, value in {**server_only, **secrets}.items()
            if value and any(value in v for v in env.values())
        ] == []
        assert env["SKILLRUNNER_PROVIDER_API_KEY"].startswith("skillrunner-placeholder-")


def test_server_log_output_carries_no_secret(live):
    """After everything above (good and bad tokens, logins, refused sockets): the web and worker
    logs hold no key, token, password or SECRET_KEY."""
    live.request("GET", "/v1/jobs", headers={"Authorization": "Token sr_ffffffffAAAAAAAAAAAAAAAAAAAAAAAA"})
    assert_logs_clean(live)
