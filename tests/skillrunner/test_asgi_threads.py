"""skillrunner.asgi: each HTTP request's sync code (middleware chain and view, as one sync call)
runs on one of a few kept threads, one request per thread from its body's arrival until its
response starts; requests beyond them wait for one, and an upload still arriving or an open
stream holds none."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest
from asgiref.sync import sync_to_async
from django.core import signals

from skillrunner.asgi import RequestThreads, ReusedThreadsASGIHandler, django_asgi


class ThreadRecordingHandler(ReusedThreadsASGIHandler):
    """Stands a request in for Django's own handling: records the thread its sync code ran on,
    then (with `stream`) starts its response, and waits for `hold` before it ends."""

    def __init__(self, threads: int = 4, hold: asyncio.Event | None = None, stream: bool = False):
        super().__init__(threads)
        self.threads_used: list[int] = []
        self.hold = hold
        self.stream = stream

    async def handle(self, scope, receive, send):
        self.threads_used.append(await sync_to_async(threading.get_ident)())
        if self.stream:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        if self.hold is not None:
            await self.hold.wait()


async def _ignore(message):
    pass


async def _empty_body():
    return {"type": "http.request", "body": b"", "more_body": False}


def _request(handler, receive=_empty_body):
    return asyncio.ensure_future(handler({"type": "http"}, receive, _ignore))


async def _until(condition, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_requests_one_after_another_run_on_the_same_thread():
    handler = ThreadRecordingHandler()

    async def three_requests():
        for _ in range(3):
            await _request(handler)

    asyncio.run(three_requests())
    assert len(handler.threads_used) == 3 and len(set(handler.threads_used)) == 1
    assert handler.threads_used[0] != threading.get_ident()


def test_requests_beyond_the_threads_wait_for_one_given_back():
    async def five_at_once():
        handler = ThreadRecordingHandler(threads=2, hold=asyncio.Event())
        requests = [_request(handler) for _ in range(5)]
        await _until(lambda: len(handler.threads_used) == 2, "two requests to run")
        await asyncio.sleep(0.05)
        assert len(handler.threads_used) == 2  # the other three wait: no third thread is made
        handler.hold.set()
        await asyncio.gather(*requests)
        return handler

    handler = asyncio.run(asyncio.wait_for(five_at_once(), timeout=10))
    assert len(handler.threads_used) == 5 and len(set(handler.threads_used)) == 2
    assert handler.threads.made == 2


def test_a_started_response_gives_its_thread_to_the_next_request():
    """An event stream runs for as long as its client listens; it must not keep others waiting."""

    async def streams_and_then_a_request():
        handler = ThreadRecordingHandler(threads=1, hold=asyncio.Event(), stream=True)
        streams = [_request(handler) for _ in range(3)]
        await _until(lambda: len(handler.threads_used) == 3, "three streams to start on one thread")
        handler.stream, handler.hold = False, None
        await asyncio.wait_for(_request(handler), timeout=5)
        for stream in streams:
            assert not stream.done()
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
        return handler

    handler = asyncio.run(asyncio.wait_for(streams_and_then_a_request(), timeout=10))
    assert len(handler.threads_used) == 4 and len(set(handler.threads_used)) == 1


def test_a_request_whose_body_is_still_arriving_holds_no_thread():
    """A slow upload would otherwise keep every other request waiting for as long as it takes."""

    async def an_upload_and_a_request():
        handler = ThreadRecordingHandler(threads=1)
        rest_sent = asyncio.Event()
        parts = [{"type": "http.request", "body": b"first part", "more_body": True}]

        async def slow_upload():
            if parts:
                return parts.pop()
            await rest_sent.wait()
            return {"type": "http.request", "body": b" and the rest", "more_body": False}

        upload = _request(handler, slow_upload)
        await asyncio.wait_for(_request(handler), timeout=5)  # runs on the one thread meanwhile
        assert not upload.done() and handler.threads._idle
        rest_sent.set()
        await asyncio.wait_for(upload, timeout=5)
        return handler

    handler = asyncio.run(asyncio.wait_for(an_upload_and_a_request(), timeout=10))
    assert len(handler.threads_used) == 2 and handler.threads.made == 1


def test_a_request_gone_while_it_waited_leaves_the_thread_to_the_next():
    async def one_waits_and_goes():
        handler = ThreadRecordingHandler(threads=1, hold=asyncio.Event())
        first = _request(handler)
        await _until(lambda: len(handler.threads_used) == 1, "the first request to run")
        gone, next_one = _request(handler), _request(handler)
        await asyncio.sleep(0.05)
        gone.cancel()
        handler.hold.set()
        await asyncio.wait_for(asyncio.gather(first, next_one), timeout=5)
        with pytest.raises(asyncio.CancelledError):
            await gone
        return handler

    handler = asyncio.run(asyncio.wait_for(one_waits_and_goes(), timeout=10))
    assert len(handler.threads_used) == 2 and handler.threads.made == 1
    assert handler.threads._idle and not handler.threads._waiting


def test_a_thread_handed_to_a_request_that_just_went_away_is_kept():
    async def handed_then_cancelled():
        threads = RequestThreads(1)
        executor = await threads.take()
        waiting = asyncio.ensure_future(threads.take())
        await asyncio.sleep(0)  # it waits for the one thread
        threads.give_back(executor)  # handed to it ...
        waiting.cancel()  # ... as its request goes, before it could run
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert threads._idle == [executor]
        assert await threads.take() is executor
        executor.shutdown()

    asyncio.run(asyncio.wait_for(handed_then_cancelled(), timeout=10))


PING = {
    "type": "http",
    "method": "GET",
    "path": "/v1/system/ping",
    "query_string": b"",
    "headers": [(b"host", b"127.0.0.1")],
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8000),
}


def _pinged(handler) -> list[dict]:
    """What `handler` sends for PING from a client that stays connected."""
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays connected

    async def send(message):
        sent.append(message)

    asyncio.run(asyncio.wait_for(handler(PING, receive, send), timeout=10))
    return sent


def test_the_middleware_chain_is_one_sync_call_that_answers_through_asgi():
    """In async mode Django would hop thread -> event loop -> thread inside every request."""
    assert not asyncio.iscoroutinefunction(django_asgi._middleware_chain)
    start = _pinged(django_asgi)[0]
    assert start["status"] == 204
    assert b"content-security-policy" in {name.lower() for name, _ in start["headers"]}  # the chain ran


def test_the_disconnect_after_a_response_leaves_no_exception_in_a_cycle():
    """daphne sends http.disconnect once a response is complete, and Django's listener raised
    RequestAborted for it: its traceback and the request's tasks referred to each other, so every
    request, its response and session waited for the cyclic collector."""
    sent: list[dict] = []
    answered = asyncio.Event()
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage
    try:
        asyncio.run(asyncio.wait_for(django_asgi(PING, receive, send), timeout=10))
        gc.collect()
        in_cycles = [type(found).__name__ for found in gc.garbage if isinstance(found, BaseException)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert sent[0]["status"] == 204 and answered.is_set()
    assert in_cycles == []


def test_another_message_after_the_body_is_refused_as_django_refuses_it():
    async def receive():
        return {"type": "http.request", "body": b"more"}

    with pytest.raises(AssertionError, match="Invalid ASGI message after request body: http.request"):
        asyncio.run(django_asgi.listen_for_disconnect(receive))


def test_djangos_request_started_receivers_run_in_the_requests_one_sync_call(monkeypatch):
    """handle() sends request_started with asend, which ran Django's receivers in a thread hop
    of their own: three sync calls per request (the signal, the chain, closing the response)."""
    from asgiref import sync

    from skillrunner import asgi

    handler = ReusedThreadsASGIHandler(1)
    assert not signals.request_started.has_listeners()  # handle()'s asend has nothing to run
    ran_on: dict[str, int] = {}
    monkeypatch.setattr(
        asgi, "_DJANGO_REQUEST_STARTED", (lambda: ran_on.setdefault("receiver", threading.get_ident()),)
    )
    chain = handler._middleware_chain
    monkeypatch.setattr(
        handler,
        "_middleware_chain",
        lambda request: ran_on.setdefault("chain", threading.get_ident()) and chain(request),
    )
    sync_calls = []
    real_call = sync.SyncToAsync.__call__

    def counted(self, *args, **kwargs):
        sync_calls.append(self.func)
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    assert _pinged(handler)[0]["status"] == 204
    assert ran_on["receiver"] == ran_on["chain"]
    assert len(sync_calls) == 1  # the chain, with the receivers first and the response's close last


def test_a_response_is_closed_once_after_its_view_and_a_stream_once_it_was_sent(monkeypatch):
    """A response that does not stream is closed in the request's one sync call (a thread hop of
    its own after it was sent cost 0.15 ms of CPU per request); a streaming one is read while it
    is sent, so it is closed only then. Either way request_finished fires once."""
    from django.http import StreamingHttpResponse

    handler = ReusedThreadsASGIHandler(1)
    happened: list[str] = []

    def finished(**kwargs):
        happened.append("finished")

    signals.request_finished.connect(finished)
    try:
        sent = _pinged(handler)
        assert sent[0]["status"] == 204 and happened == ["finished"]

        happened.clear()
        monkeypatch.setattr(handler, "_middleware_chain", lambda request: StreamingHttpResponse(iter([b"one", b"two"])))
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            if messages:
                return messages.pop()
            await asyncio.Event().wait()

        async def send(message):
            happened.append(message["type"] + ":" + message.get("body", b"").decode())

        asyncio.run(asyncio.wait_for(handler(PING, receive, send), timeout=10))
    finally:
        signals.request_finished.disconnect(finished)
    assert happened[-1] == "finished" and happened.count("finished") == 1
    assert "http.response.body:one" in happened and "http.response.body:two" in happened
