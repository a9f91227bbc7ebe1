"""skillrunner.asgi: each HTTP request's sync code runs on a thread kept from an earlier request,
one request per thread at a time, and only so many threads are kept."""

from __future__ import annotations

import asyncio
import threading

from asgiref.sync import sync_to_async

from skillrunner.asgi import ReusedThreadsASGIHandler


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
