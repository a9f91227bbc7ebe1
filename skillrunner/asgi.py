"""HTTP through Django, websockets through Channels (R-UI2)."""

import asyncio
import collections
import contextlib
import contextvars
import gc
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.db import close_old_connections, reset_queries
from django.urls import set_script_prefix

from processes.memory import TrimWhenIdle
from processes.startup import start_process

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skillrunner.settings")
# A web started alone (README "Scaling out") prepares the installation as `serve` and `worker` do:
# without it, on a data dir no other process had prepared and without SECRET_KEY, every request
# would answer 500 (R-OP12). What the web writes (uploads, run folders) is private to its user.
start_process()
django.setup(set_prefix=False)  # what get_asgi_application() does before it makes its own handler


class RequestThreads:
    """The threads that run requests' sync code: made as needed up to `size`, then kept for the
    process's life; a request finding none free waits for one. Touched only on the event loop.

    A burst of requests used to make a thread each (50 at once: 50 threads, 34 of them joined
    after it), and every new thread opened its own database connection and compiled the dispatch
    read again (kernel.compiled): some 4 ms of a run's creation. On SQLite the writes queue for
    one lock anyway, so more threads only added that work and the memory of their connections."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.made = 0
        self._idle: list[ThreadPoolExecutor] = []  # the last one given back is taken first: its caches are warm
        self._waiting: collections.deque[asyncio.Future[ThreadPoolExecutor]] = collections.deque()
        self._trim = TrimWhenIdle(lambda: len(self._idle) == self.made)

    async def take(self) -> ThreadPoolExecutor:
        if self._idle:
            return self._idle.pop()
        if self.made < self.size:
            self.made += 1
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # given a thread just as the request went away
                self.give_back(turn.result())
            raise

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(executor)
                return
        self._idle.append(executor)
        if len(self._idle) == self.made:
            self._trim.soon()  # no request runs: a burst's freed memory goes back if none does a second later


# What Django connects to request_started, run by ReusedThreadsASGIHandler on the request's thread.
_DJANGO_REQUEST_STARTED = (reset_queries, close_old_connections)

# A request's body, read before it takes a thread (ReusedThreadsASGIHandler).
_request_body: contextvars.ContextVar[Any] = contextvars.ContextVar("request_body")


class ReusedThreadsASGIHandler(ASGIHandler):
    """Django's ASGI handler with three changes to where a request's sync code runs.

    - The middleware chain and the view run as one sync call on the request's thread. Django's
      own handler builds the chain in async mode: with sync middleware and sync views, that went
      from the thread back to the event loop and out to the thread again in every request. An
      empty request took 0.4 ms less CPU this way (1.1 ms instead of 1.5).
    - That thread is one of a few kept (RequestThreads) instead of one made and joined for this
      request alone: an empty request took 2.1 ms over HTTP, 1.7 ms this way. The request takes
      it once its body has arrived (a slow upload holds none) and has it to itself until its
      response starts; what little sync work is left then (closing the response, a file's chunks,
      an event stream's reads) shares it with the next request, so an open stream holds no thread.
    - Django's own request_started receivers (reset_queries, close_old_connections) run first in
      that sync call. handle() sends the signal with asend, which ran them in a thread hop of their
      own, with a wake-up of the event loop: a status GET took 0.96 ms of the web's CPU with it,
      0.79 ms without. A handler takes them off the signal when it is made; receivers connected
      by anyone else still run as Django runs them (as do these two, with the hop, should
      something connect them again: Django's test client and CaptureQueriesContext do).
    - A response that does not stream is closed in that same sync call, once the view has
      returned it (request_finished: the request's database connection closed or given back),
      not in a thread hop of its own after it was sent: an empty request took 0.85 ms of the
      web's CPU instead of 0.95, and a burst's client sends a run some 16 of them.
      handle() is Django's but for that; a streaming response is closed once sent, as Django does.

    Body reading, disconnects and streaming (also of async iterators) stay Django's."""

    def __init__(self, threads: int) -> None:
        BaseHandler.__init__(self)  # not ASGIHandler's, which loads the middleware in async mode
        self.load_middleware(is_async=False)
        self.threads = RequestThreads(threads)
        for receiver in _DJANGO_REQUEST_STARTED:
            signals.request_started.disconnect(receiver)

    async def get_response_async(self, request):
        return await sync_to_async(self._started_then_response)(request)  # thread-sensitive: the request's thread

    def _started_then_response(self, request):
        for receiver in _DJANGO_REQUEST_STARTED:
            receiver()
        response = self.get_response(request)
        if not response.streaming:
            response.close()  # its content is bytes already: nothing is left to read from the view
        return response

    async def handle(self, scope, receive, send):
        """Django's ASGIHandler.handle (the view raced against the client's disconnect) but for
        a response closed already (_started_then_response), which is not closed again."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        await signals.request_started.asend(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            assert error_response is not None  # create_request gives one or the other
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return

        async def process_request():
            response = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # the client went while it was sent
                await self.send_response(response, send)
            return response

        disconnect = asyncio.create_task(self.listen_for_disconnect(receive))
        processing = asyncio.create_task(process_request())
        await asyncio.wait([disconnect, processing], return_when=asyncio.FIRST_COMPLETED)
        for task in (disconnect, processing):  # the listener first: it must not keep the view running
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:  # the view may handle its cancellation
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            response = processing.result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            if not response.closed:
                await sync_to_async(response.close)()
        body_file.close()

    async def read_body(self, receive):
        """The body __call__ has read: handle() reads it first thing, before any sync call."""
        return _request_body.get()

    async def listen_for_disconnect(self, receive):
        """Ends when the client has gone, as Django's does, but without raising RequestAborted.

        daphne sends the disconnect once a response is complete, so Django's raised it on every
        request. handle() ignores it (it cancels the view if the client went first, either way),
        but its traceback held handle()'s frame, whose task list held the exception: the request,
        its response and session stayed as cyclic garbage until the next collection, some 150
        objects a request, which the web's young-generation threshold (below) lets pile up. With
        the other cycles a request leaves, a 50-run burst left the web 7 MiB of allocator arenas,
        mostly empty, for as long as it ran."""
        message = await receive()
        if message["type"] != "http.disconnect":  # as Django's: handle() closes the body, re-raises
            raise AssertionError(f"Invalid ASGI message after request body: {message['type']}")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        try:
            body = await super().read_body(receive)
        except RequestAborted:
            return
        try:
            executor = await self.threads.take()
        except BaseException:
            body.close()  # gone while it waited: handle() would have closed it
            raise
        held = True

        def give_back() -> None:
            nonlocal held
            if held:
                held = False
                self.threads.give_back(executor)

        async def send_then_share(message):
            if message["type"] == "http.response.start":
                give_back()
            await send(message)

        read = _request_body.set(body)
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send_then_share)
        finally:
            _request_body.reset(read)
            give_back()


django_asgi = ReusedThreadsASGIHandler(settings.SKILLRUNNER_WEB_DB_CONNECTIONS)

from channels.routing import ProtocolTypeRouter  # noqa: E402  (needs Django set up)

from live.routing import websocket_application  # noqa: E402
from live.shutdown import install_in_daphne  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi, "websocket": websocket_application})
install_in_daphne()  # a stopping web process closes its websockets with 1001 (R-OP10)

# The cyclic collector's youngest generation is collected after 10,000 new objects instead of 700:
# with a thousand live connections a web process holds some 400,000 objects, and the full passes
# that promotions out of a small young generation brought on every few seconds took 0.3-0.5 s each,
# during which no socket or stream was served (bench.crowd: the p99 of a run event's fan-out went
# from 0.6-0.9 s to about 0.2 s, with no full pass left in its rounds). It was 50,000 from then
# until connections took a fifth of the memory they did: every request leaves a hundred objects or
# so in cycles (Django's request with its user, session and messages, DRF's request and view), and
# 50,000 of them at a time grew the allocator's arenas, which what stays of a burst then pins: a
# 50-run burst at cap 16 left the tree 1.31-1.34 x its idle memory, 1.27-1.30 at 10,000. The
# fan-out's p99 stays within the spread of its runs (83-141 ms at 50,000, 115-130 at 10,000;
# docs/benchmarks.md).
# (`manage.py serve` imports this module before it forks, so its worker collects the same way.)
gc.set_threshold(10_000)
