"""Live connections (websockets and event streams) per user: capped, idle ones cost no database
reads (R-FS2), and closed when their token is revoked or their browser session ends (R-FS3).

In process, over the ASGI application; tests/end_to_end/test_live_connections.py repeats the essentials
against a real daphne."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.management.commands import changepassword
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.db import transaction
from django.db.backends.utils import CursorWrapper
from django.test import Client
from django.utils import timezone

from accounts.connections import open_connection
from accounts.models import ApiToken, LiveConnection
from accounts.services import revoke_tokens
from kernel.errors import ApplicationError
from live import inbox
from live import watcher as live
from runs.events import append_event
from runs.models import Run, RunEvent
from tests.support.service_processes import wait_until
from tests.support.web_clients import (
    SAME_SITE,
    receive_messages,
    receive_until_closed,
    run_async,
    run_socket,
    token_headers,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

CLOSE_TOO_MANY_STREAMS = 4429
CLOSE_UNAUTHENTICATED = 4401


def inbox_socket(headers) -> WebsocketCommunicator:
    from skillrunner.asgi import application

    return WebsocketCommunicator(application, "/ws/inbox/", headers=headers)


async def open_run_socket(request_id: str, headers) -> WebsocketCommunicator:
    socket = run_socket(request_id, headers)
    assert (await socket.connect())[0]
    assert (await socket.receive_json_from(5))["type"] == "snapshot"
    return socket


def session_headers(browser: Client) -> list[tuple[bytes, bytes]]:
    """The handshake of a socket of this test client's browser session, from the site itself."""
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [(b"cookie", cookie.encode()), *SAME_SITE]


def stream_status(client, request_id: str):
    """GET /v1/jobs/{id}/events without reading the stream: its status and, if refused, its body."""
    response = client.get(f"/v1/jobs/{request_id}/events")
    return response.status_code, (None if response.streaming else response.json())


def test_websockets_and_streams_share_one_cap_per_user(api, bob_api, trip_run, settings):
    settings.SKILLRUNNER_USER_MAX_STREAMS = 2
    request_id = trip_run()
    bobs_run = trip_run(bob_api)

    async def scenario():
        first = await open_run_socket(request_id, token_headers(api))
        inbox_ = inbox_socket(token_headers(api))
        assert (await inbox_.connect())[0]
        assert (await inbox_.receive_json_from(5))["type"] == "inbox"
        refused = run_socket(request_id, token_headers(api))
        assert (await refused.connect())[0]
        refusal = await receive_until_closed(refused)
        stream = await sync_to_async(stream_status)(api, request_id)
        bobs = await open_run_socket(bobs_run, token_headers(bob_api))  # another user's cap is their own
        await first.disconnect()  # its place is free again at once
        again = await open_run_socket(request_id, token_headers(api))
        for socket in (inbox_, bobs, again):
            await socket.disconnect()
        return refusal, stream

    (messages, code), (status, body) = run_async(scenario)
    assert code == CLOSE_TOO_MANY_STREAMS
    assert [(m["type"], m["code"], m["limit"]) for m in messages] == [("error", "TOO_MANY_STREAMS", 2)]
    assert status == 429
    assert body["detail"] == {
        "code": "TOO_MANY_STREAMS",
        "message": "you have 2 live connections (websockets and event streams), the most one user may have; "
        "close one and try again",
        "limit": 2,
    }
    assert not LiveConnection.objects.exists()  # every socket's place was given back


def test_an_open_stream_counts_and_a_refused_one_takes_no_place(api, trip_run, settings):
    settings.SKILLRUNNER_USER_MAX_STREAMS = 1
    request_id = trip_run()
    assert stream_status(api, request_id)[0] == 200
    assert stream_status(api, request_id)[0] == 429
    assert LiveConnection.objects.count() == 1


def test_places_of_other_processes_count_until_their_lease_expires(alice, api, trip_run, settings):
    """Every web process counts every process's connections; those of a process that died (its
    lease no longer renewed) stop counting once expired."""
    settings.SKILLRUNNER_USER_MAX_STREAMS = 2
    request_id = trip_run()
    now = timezone.now()
    LiveConnection.objects.create(user=alice, expires_at=now + timedelta(seconds=60))  # alive elsewhere
    LiveConnection.objects.create(user=alice, expires_at=now - timedelta(seconds=1))  # its process died
    assert stream_status(api, request_id)[0] == 200
    assert stream_status(api, request_id)[0] == 429


def test_idle_connections_read_nothing_however_many(api, trip_run, monkeypatch):
    """N idle sockets on a waiting run cost no read each: the tails read only when woken."""
    request_id = trip_run()
    reads = {"events": 0, "inbox": 0}
    status_and_events, inbox_message = live.status_and_events, inbox.inbox_message

    def counted_events_after(*args, **kwargs):
        reads["events"] += 1
        return status_and_events(*args, **kwargs)

    def counted_inbox_message(*args, **kwargs):
        reads["inbox"] += 1
        return inbox_message(*args, **kwargs)

    monkeypatch.setattr(live, "status_and_events", counted_events_after)
    monkeypatch.setattr(inbox, "inbox_message", counted_inbox_message)
    # Were idle listeners polling, it would show many times within the idle second below.
    monkeypatch.setattr(live, "SAFETY_POLL_SECONDS", 0.05)
    sockets = 5

    async def scenario():
        runs = [await open_run_socket(request_id, token_headers(api)) for _ in range(sockets)]
        inboxes = [inbox_socket(token_headers(api)) for _ in range(sockets)]
        for socket in inboxes:
            assert (await socket.connect())[0]
            await socket.receive_json_from(5)
        for socket in runs:
            await receive_messages(socket, 5)  # the run's events so far
        before = dict(reads)
        for socket in runs + inboxes:
            assert await socket.receive_nothing(1.0 / (2 * sockets))
        idle = {kind: reads[kind] - before[kind] for kind in reads}
        await sync_to_async(api.post)(
            f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json"
        )
        ends = [await receive_until_closed(socket) for socket in runs]
        for socket in inboxes:
            await socket.disconnect()
        return idle, ends

    idle, ends = run_async(scenario)
    assert idle == {"events": 0, "inbox": 0}
    assert all(code == 1000 and messages[-1]["payload"]["to"] == "succeeded" for messages, code in ends)
    assert reads["events"] and reads["inbox"]  # what was counted is what the tails read


@contextmanager
def reads_of_run_events() -> Iterator[list[str]]:
    """Every statement that any thread of this process runs to read a run's events after a seq
    (what sockets and streams read; the watcher's own poll reads by id)."""
    seen: list[str] = []
    execute = CursorWrapper.execute

    def recording(self, sql, params=None):
        if '"runs_runevent"."seq" >' in sql:
            seen.append(sql)
        return execute(self, sql, params)

    with mock.patch.object(CursorWrapper, "execute", recording):
        yield seen


def add_warning(request_id: str) -> None:
    with transaction.atomic():
        append_event(Run.objects.select_for_update().get(pk=request_id), "warning", {"code": "TEST", "message": "hi"})


async def settled(count: Callable[[], int], quiet: float = 0.3, timeout: float = 10.0) -> int:
    """`count()` once it has not changed for `quiet` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    last = count()
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(quiet)
        if count() == last:
            return last
        last = count()
    raise AssertionError(f"still changing after {timeout}s")


def test_the_listeners_of_a_run_read_its_new_events_together(api, trip_run):
    """R-SC2: an event wakes every socket and stream of its run in this process together, and one
    read of the event table serves them all; each used to read for itself, so one event cost a
    query per listener."""
    request_id = trip_run()
    listeners = 10  # sockets, and as many streams

    async def scenario():
        sockets = [await open_run_socket(request_id, token_headers(api)) for _ in range(listeners)]
        for socket in sockets:
            assert [m["seq"] for m in await receive_messages(socket, 5)] == [1, 2, 3, 4, 5]
        streams = []
        for _ in range(listeners):
            response = await sync_to_async(api.get)(f"/v1/jobs/{request_id}/events", {"after_seq": 4})
            streams.append(aiter(response.streaming_content))
            assert (await anext(streams[-1])).startswith(b"id: 5\n")  # its listener is in place
        with reads_of_run_events() as reads:
            next_frames = [asyncio.ensure_future(anext(stream)) for stream in streams]
            before = await settled(lambda: len(reads))  # each stream read once more, and now waits
            await sync_to_async(add_warning)(request_id)
            received = [await socket.receive_json_from(5) for socket in sockets]
            frames = await asyncio.wait_for(asyncio.gather(*next_frames), 5)
            woken = len(reads) - before
        await sync_to_async(api.post)(
            f"/v1/jobs/{request_id}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json"
        )
        ends = [await receive_until_closed(socket) for socket in sockets]
        rest = await asyncio.wait_for(asyncio.gather(*(drain(stream) for stream in streams)), 10)
        return received, frames, woken, ends, rest

    received, frames, woken, ends, rest = run_async(scenario)
    assert [m["seq"] for m in received] == [6] * listeners
    assert all(frame.startswith(b"id: 6\nevent: warning\n") for frame in frames)
    assert 1 <= woken <= 2, woken  # one read, or two if the wake-ups straddled one
    assert all(code == 1000 for _, code in ends)
    assert all(frames_left[-1] == b"event: end\ndata: {}\n\n" for frames_left in rest)


def test_the_watcher_reads_the_event_table_only_when_woken(api, trip_run, monkeypatch):
    """On the embedded default a commit in any process on the host wakes the watcher through its
    socket (processes.group_messages); it used to read the event table every 20 ms while anyone
    listened, 9 % of a core for one open page."""
    monkeypatch.setattr(live, "SAFETY_POLL_SECONDS", 60.0)  # far beyond the waits below
    request_id = trip_run()
    reads: list[int] = []
    events_since = live._events_since

    def counted(last_id: int, missing: list[int]):
        reads.append(last_id)
        return events_since(last_id, missing)

    monkeypatch.setattr(live, "_events_since", counted)

    async def scenario():
        socket = await open_run_socket(request_id, token_headers(api))
        assert [m["seq"] for m in await receive_messages(socket, 5)] == [1, 2, 3, 4, 5]
        await asyncio.sleep(1.0)
        idle = len(reads)
        await sync_to_async(add_warning)(request_id)
        warning = await socket.receive_json_from(5)
        await socket.disconnect()
        return idle, warning, len(reads) - idle

    idle, warning, woken = run_async(scenario)
    assert idle == 0
    assert (warning["seq"], woken) == (6, 1)


async def drain(stream) -> list[bytes]:
    return [chunk async for chunk in stream]


def test_revoking_a_token_closes_its_sockets(api, staff_api, admin_user, trip_run):
    request_id = trip_run()
    other = staff_api  # another token: its sockets stay open
    token = ApiToken.objects.get(user=api.user)

    async def scenario():
        run = await open_run_socket(request_id, token_headers(api))
        inbox_ = inbox_socket(token_headers(api))
        assert (await inbox_.connect())[0]
        await inbox_.receive_json_from(5)
        kept = await open_run_socket(request_id, token_headers(other))
        await receive_messages(run, 5)
        await receive_messages(kept, 5)
        await sync_to_async(revoke_tokens)(ApiToken.objects.filter(pk=token.pk))
        closed = [await receive_until_closed(socket) for socket in (run, inbox_)]
        still_open = await kept.receive_nothing(0.5)
        await kept.disconnect()
        return closed, still_open

    closed, still_open = run_async(scenario)
    for messages, code in closed:
        assert code == CLOSE_UNAUTHENTICATED
        assert [(m["type"], m["code"]) for m in messages if m["type"] == "error"] == [("error", "NOT_AUTHENTICATED")]
    assert still_open


def test_the_admin_revoke_action_revokes_and_closes(api, admin_client, trip_run):
    request_id = trip_run()
    token = ApiToken.objects.get(user=api.user)

    async def scenario():
        run = await open_run_socket(request_id, token_headers(api))
        await receive_messages(run, 5)
        answer = await sync_to_async(admin_client.post)(
            "/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}
        )
        assert answer.status_code == 302
        return await receive_until_closed(run)

    _, code = run_async(scenario)
    assert code == CLOSE_UNAUTHENTICATED
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None


def test_logging_out_closes_that_sessions_sockets(alice, api, trip_run):
    request_id = trip_run()
    browser, other_browser = Client(), Client()
    browser.force_login(alice)
    other_browser.force_login(alice)

    async def scenario():
        signed_out = await open_run_socket(request_id, session_headers(browser))
        inbox_ = inbox_socket(session_headers(browser))
        assert (await inbox_.connect())[0]
        await inbox_.receive_json_from(5)
        kept = await open_run_socket(request_id, session_headers(other_browser))
        await receive_messages(signed_out, 5)
        await receive_messages(kept, 5)
        assert (await sync_to_async(browser.post)("/accounts/logout/")).status_code == 302
        closed = [await receive_until_closed(socket) for socket in (signed_out, inbox_)]
        still_open = await kept.receive_nothing(0.5)
        await kept.disconnect()
        return closed, still_open

    closed, still_open = run_async(scenario)
    assert [code for _, code in closed] == [CLOSE_UNAUTHENTICATED, CLOSE_UNAUTHENTICATED]
    assert still_open


def test_a_process_renews_the_leases_of_its_open_connections(api, trip_run, monkeypatch):
    """What keeps a live connection counted (and a dead process's not): its process renews it."""
    monkeypatch.setattr(live, "RENEW_SECONDS", 0.05)
    request_id = trip_run()

    async def scenario():
        socket = await open_run_socket(request_id, token_headers(api))
        soon = timezone.now() + timedelta(seconds=5)
        await sync_to_async(LiveConnection.objects.update)(expires_at=soon)
        renewed = await sync_to_async(wait_until)(
            lambda: LiveConnection.objects.filter(expires_at__gt=soon).exists(), 10, "the lease to be renewed"
        )
        await socket.disconnect()
        return renewed

    assert run_async(scenario)


def test_a_token_revoked_while_its_connection_opens_is_refused(api):
    """Revoked between authenticating the caller and counting the connection: no connection is
    left that its revocation did not see."""
    token = ApiToken.objects.get(user=api.user)  # as the caller authenticated it
    revoke_tokens(ApiToken.objects.filter(pk=token.pk))
    with pytest.raises(ApplicationError) as refused:
        open_connection(api.user, token=token)
    assert (refused.value.status_code, refused.value.code) == (401, "NOT_AUTHENTICATED")
    assert not LiveConnection.objects.exists()


@pytest.mark.parametrize("ended_by", ["token revoked in place", "user deactivated"])
def test_credentials_ended_by_any_path_close_their_sockets(api, trip_run, monkeypatch, ended_by):
    """Not only revoke_tokens and sign-out: a token revoked by an update of its own (the admin's
    change form) or a deactivated user ends the sockets at the process's next check."""
    monkeypatch.setattr(live, "RENEW_SECONDS", 0.05)
    request_id = trip_run()

    def end() -> None:
        if ended_by == "user deactivated":
            type(api.user).objects.filter(pk=api.user.pk).update(is_active=False)
        else:
            ApiToken.objects.filter(user=api.user).update(revoked_at=timezone.now())

    async def scenario():
        socket = await open_run_socket(request_id, token_headers(api))
        await receive_messages(socket, 5)
        await sync_to_async(end)()
        return await receive_until_closed(socket)

    _, code = run_async(scenario)
    assert code == CLOSE_UNAUTHENTICATED


def test_an_expired_browser_session_closes_its_sockets(alice, trip_run, monkeypatch):
    monkeypatch.setattr(live, "RENEW_SECONDS", 0.05)
    request_id = trip_run()
    browser = Client()
    browser.force_login(alice)
    key = browser.cookies[settings.SESSION_COOKIE_NAME].value

    async def scenario():
        socket = await open_run_socket(request_id, session_headers(browser))
        await receive_messages(socket, 5)
        await sync_to_async(Session.objects.filter(session_key=key).update)(expire_date=timezone.now())
        return await receive_until_closed(socket)

    _, code = run_async(scenario)
    assert code == CLOSE_UNAUTHENTICATED


NEW_PASSWORD = "a-new-password-456"


def set_password_and_save(user) -> None:
    user.set_password(NEW_PASSWORD)
    user.save()


def changepassword_command(user, monkeypatch) -> None:
    monkeypatch.setattr(changepassword.getpass, "getpass", lambda prompt="": NEW_PASSWORD)
    call_command("changepassword", user.username, stdout=io.StringIO())


def admin_password_form(user) -> None:
    staff = Client()
    staff.force_login(type(user).objects.create_user("root", is_staff=True, is_superuser=True))
    answer = staff.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"usable_password": "true", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert answer.status_code == 302, answer.content


CHANGES = {
    "set_password and save": lambda user, monkeypatch: set_password_and_save(user),
    "manage.py changepassword": changepassword_command,
    "the admin's password form": lambda user, monkeypatch: admin_password_form(user),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_new_password_closes_the_users_browser_sockets_and_streams_not_their_token_sockets(
    alice, api, trip_run, monkeypatch, change
):
    """Django refuses a session made before a password change at its next request; a socket or
    an event stream holds no next request, so the change itself closes them, however it is made.
    A save that keeps the password closes nothing."""
    request_id = trip_run()
    last_seq = RunEvent.objects.filter(run_id=request_id).latest("seq").seq
    browsers = [Client(), Client()]
    for browser in browsers:
        browser.force_login(alice)

    def save_without_new_password() -> None:
        user = type(alice).objects.get(pk=alice.pk)
        user.first_name = "Alice"
        user.save()

    def change_password() -> None:
        CHANGES[change](type(alice).objects.get(pk=alice.pk), monkeypatch)

    async def read_stream(response, into: list[str]) -> None:
        async for chunk in response.streaming_content:
            into.append(chunk.decode() if isinstance(chunk, bytes) else chunk)

    async def scenario():
        sessions = [await open_run_socket(request_id, session_headers(browser)) for browser in browsers]
        token_socket = await open_run_socket(request_id, token_headers(api))
        for socket in (*sessions, token_socket):
            await receive_messages(socket, 5)
        # The second browser's event stream, after the events so far: it only waits.
        stream = await sync_to_async(browsers[1].get)(f"/v1/jobs/{request_id}/events", {"after_seq": last_seq})
        assert stream.status_code == 200 and stream.streaming
        streamed: list[str] = []
        reader = asyncio.ensure_future(read_stream(stream, streamed))
        await sync_to_async(save_without_new_password)()
        kept_after_save = [await socket.receive_nothing(0.3) for socket in sessions]
        stream_kept = not reader.done() and streamed == []
        await sync_to_async(change_password)()
        closed = [await receive_until_closed(socket) for socket in sessions]
        await asyncio.wait_for(reader, 5)
        token_kept = await token_socket.receive_nothing(0.5)
        await token_socket.disconnect()
        return kept_after_save, stream_kept, closed, "".join(streamed), token_kept

    kept_after_save, stream_kept, closed, streamed, token_kept = run_async(scenario)
    assert kept_after_save == [True, True] and stream_kept
    assert [code for _, code in closed] == [CLOSE_UNAUTHENTICATED, CLOSE_UNAUTHENTICATED]
    assert streamed.startswith("event: error\n") and '"code": "NOT_AUTHENTICATED"' in streamed
    assert token_kept
    assert not LiveConnection.objects.filter(user=alice).exclude(session_key="").exists()
    assert Client().login(username="alice", password=NEW_PASSWORD)  # the change itself took
    for browser in browsers:  # and Django refuses the sessions themselves
        assert browser.get("/").status_code == 302


def test_a_session_whose_password_changed_while_its_connection_opens_is_refused(alice):
    """The password changed between authenticating the browser and counting its connection: no
    connection is left that the change did not see."""
    as_authenticated = type(alice).objects.get(pk=alice.pk)
    set_password_and_save(type(alice).objects.get(pk=alice.pk))
    with pytest.raises(ApplicationError) as refused:
        open_connection(as_authenticated, session_key="a-session-of-alice")
    assert (refused.value.status_code, refused.value.code) == (401, "NOT_AUTHENTICATED")
    assert not LiveConnection.objects.exists()
    # The same caller authenticated by a token is no concern of the password.
    assert open_connection(as_authenticated, token=ApiToken.issue(alice)[0]).token_id is not None


def test_the_browser_changing_its_own_password_stays_signed_in_and_its_other_sessions_do_not(admin_user, trip_run):
    """The admin's own password form: Django keeps the changing browser signed in under a new
    session key, so its sockets open again at once; the sockets of its other session stay refused."""
    request_id = trip_run()
    changing, other = Client(), Client()
    for browser in (changing, other):
        browser.force_login(admin_user)
    answer = changing.post(
        "/admin/password_change/",
        {"old_password": "root-password-123", "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert answer.status_code == 302, answer.content

    async def scenario():
        again = await open_run_socket(request_id, session_headers(changing))
        await again.disconnect()
        refused = run_socket(request_id, session_headers(other))
        assert (await refused.connect())[0]
        return await receive_until_closed(refused)

    _, code = run_async(scenario)
    assert code == CLOSE_UNAUTHENTICATED
