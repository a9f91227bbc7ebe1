"""Who may open a run socket (R-UI2): the same owners-only rule as the API, origin-checked cookies."""

from __future__ import annotations

import pytest

from tests.support.web_clients import (
    SAME_SITE,
    browser_headers,
    receive_until_closed,
    run_async,
    run_socket,
    session_cookie,
    token_headers,
)

pytestmark = pytest.mark.django_db(transaction=True)


def close_code(request_id: str, headers, after_seq=None) -> tuple[bool, int | None]:
    """(handshake accepted, close code) for a connection the server should refuse."""

    async def scenario():
        socket = run_socket(request_id, headers, after_seq)
        connected, code = await socket.connect()
        if not connected:
            return False, code
        messages, code = await receive_until_closed(socket)
        assert [m["type"] for m in messages] in ([], ["error"])
        return True, code

    return run_async(scenario)


def test_token_header_authenticates_api_clients(api, trip_run):
    request_id = trip_run()

    async def scenario():
        socket = run_socket(request_id, token_headers(api))  # no Origin: not a browser
        connected, _ = await socket.connect()
        first = await socket.receive_json_from()
        await socket.disconnect()
        return connected, first

    connected, first = run_async(scenario)
    assert connected and first["type"] == "snapshot"


def test_session_cookie_from_an_allowed_origin(alice, trip_run):
    request_id = trip_run()
    headers = browser_headers(alice)

    async def scenario():
        socket = run_socket(request_id, headers)
        assert (await socket.connect())[0]
        first = await socket.receive_json_from()
        await socket.disconnect()
        return first

    assert run_async(scenario)["run"]["request_id"] == request_id


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",
        "https://localhost",  # R-FS3: another scheme
        "http://localhost:8001",  # another port
        "http://localhost.evil.example",
        "http://127.0.0.1",  # an allowed host, but not the one the page came from
    ],
)
def test_session_cookie_from_a_foreign_origin_is_refused(alice, trip_run, origin):
    request_id = trip_run()
    assert close_code(request_id, browser_headers(alice, origin)) == (False, 1000)


@pytest.mark.parametrize(
    "origin,host,extra",
    [
        ("http://localhost:8000", "localhost:8000", []),
        ("http://localhost:80", "localhost", []),
        ("https://localhost", "localhost", [(b"x-forwarded-proto", b"https")]),
    ],
)
def test_session_cookie_from_the_exact_origin_R_FS3(alice, trip_run, settings, origin, host, extra):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    request_id = trip_run()
    headers = browser_headers(alice, origin, host) + extra

    async def scenario():
        socket = run_socket(request_id, headers)
        assert (await socket.connect())[0]
        first = await socket.receive_json_from()
        await socket.disconnect()
        return first

    assert run_async(scenario)["type"] == "snapshot"


def test_a_host_outside_allowed_hosts_is_refused_R_FS3(alice, trip_run):
    request_id = trip_run()
    headers = browser_headers(alice, "http://evil.example", "evil.example")
    assert close_code(request_id, headers) == (False, 1000)


def test_session_cookie_without_origin_is_refused(alice, trip_run):
    request_id = trip_run()
    assert close_code(request_id, [(b"cookie", session_cookie(alice))])[0] is False


def test_no_credentials_closes_4401(trip_run):
    request_id = trip_run()
    assert close_code(request_id, SAME_SITE) == (True, 4401)


@pytest.mark.parametrize("header", [b"Token sr_notarealtoken0000000000000000000", b"Bearer abc", b"Token"])
def test_bad_token_closes_4401_even_with_a_session(alice, trip_run, header):
    request_id = trip_run()
    headers = [(b"authorization", header), *browser_headers(alice)]
    assert close_code(request_id, headers) == (True, 4401)


def test_token_in_the_url_is_ignored(api, trip_run):
    request_id = trip_run()
    headers = SAME_SITE

    async def scenario():
        from channels.testing import WebsocketCommunicator

        from skillrunner.asgi import application

        socket = WebsocketCommunicator(application, f"/ws/runs/{request_id}/?token={api.token_key}", headers=headers)
        assert (await socket.connect())[0]
        return await receive_until_closed(socket)

    assert run_async(scenario) == ([], 4401)


def test_foreign_run_closes_4404(bob_api, bob, trip_run):
    request_id = trip_run()  # alice's
    assert close_code(request_id, token_headers(bob_api)) == (True, 4404)
    assert close_code(request_id, browser_headers(bob)) == (True, 4404)
    assert close_code("not-a-uuid", token_headers(bob_api)) == (True, 4404)


def test_staff_sees_every_run(staff_api, trip_run):
    request_id = trip_run()

    async def scenario():
        socket = run_socket(request_id, token_headers(staff_api))
        assert (await socket.connect())[0]
        first = await socket.receive_json_from()
        await socket.disconnect()
        return first

    assert run_async(scenario)["type"] == "snapshot"


@pytest.mark.parametrize("cursor", ["-1", "abc", "²", "1.5"])
def test_bad_cursor_is_a_coded_error(api, trip_run, cursor):
    request_id = trip_run()

    async def scenario():
        socket = run_socket(request_id, token_headers(api))
        socket.scope["query_string"] = f"after_seq={cursor}".encode()
        assert (await socket.connect())[0]
        return await receive_until_closed(socket)

    messages, code = run_async(scenario)
    assert code == 4400 and messages[0]["code"] == "INVALID_CURSOR"


def test_visibility_is_checked_again_on_every_message(admin_user, staff_api, trip_run):
    """A staff member who loses staff rights while connected can no longer answer someone's run."""
    request_id = trip_run()

    async def scenario():
        from asgiref.sync import sync_to_async

        socket = run_socket(request_id, token_headers(staff_api), after_seq=5)
        assert (await socket.connect())[0]
        await socket.receive_json_from()
        admin_user.is_staff = False
        await sync_to_async(admin_user.save)()
        await socket.send_json_to({"type": "reply", "interaction_id": 1, "response": "Oslo"})
        answer = await socket.receive_json_from()
        await socket.disconnect()
        return answer

    assert run_async(scenario)["code"] == "RUN_NOT_FOUND"
