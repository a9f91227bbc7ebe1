"""skillrunner.asgi: each HTTP request's sync code (middleware chain and view, as one sync call)
runs on a thread kept from an earlier request, one request per thread at a time, and only so
many threads are kept."""

from __future__ import annotations

import asyncio
import threading

from asgiref.sync import sync_to_async

from skillrunner.asgi import ReusedThreadsASGIHandler, django_asgi


class ThreadRecordingHandler(ReusedThreadsASGIHandler):
    """Stands a request in for Django's own handling: records the thread its sync code ran on."""

    def __init__(self, hold: asyncio.Event | None = None):
        super().__init__()
        self.threads: list[int] = []
        self.hold = hold

    async def handle(self, scope, receive, send):
        self.threads.append(await sync_to_async(threading.get_ident)())
        if self.hold is not None:
            await self.hold.wait()


def _request(handler):
    return handler({"type": "http"}, None, None)


def test_requests_one_after_another_run_on_the_same_thread():
    handler = ThreadRecordingHandler()

    async def three_requests():
        for _ in range(3):
            await _request(handler)

    asyncio.run(three_requests())
    assert len(handler.threads) == 3 and len(set(handler.threads)) == 1
    assert handler.threads[0] != threading.get_ident()


def test_requests_at_the_same_time_each_have_a_thread_and_only_so_many_are_kept():
    async def at_once(count):
        handler = ThreadRecordingHandler(hold=asyncio.Event())
        handler.max_idle_threads = 2
        requests = [asyncio.ensure_future(_request(handler)) for _ in range(count)]
        while len(handler.threads) < count:
            await asyncio.sleep(0.01)
        handler.hold.set()
        await asyncio.gather(*requests)
        return handler

    handler = asyncio.run(asyncio.wait_for(at_once(4), timeout=10))
    assert len(set(handler.threads)) == 4
    assert len(handler._idle) == 2


def test_the_middleware_chain_is_one_sync_call_that_answers_through_asgi():
    """In async mode Django would hop thread -> event loop -> thread inside every request."""
    assert not asyncio.iscoroutinefunction(django_asgi._middleware_chain)
    sent = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays connected

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/system/ping",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    asyncio.run(asyncio.wait_for(django_asgi(scope, receive, send), timeout=10))
    start = sent[0]
    assert start["status"] == 204
    assert b"content-security-policy" in {name.lower() for name, _ in start["headers"]}  # the chain ran
