"""HTTP through Django, websockets through Channels (R-UI2)."""

import gc
import os
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.db import connections

from processes.startup import start_process

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skillrunner.settings")
# A web started alone (README "Scaling out") prepares the installation as `serve` and `worker` do:
# without it, on a data dir no other process had prepared and without SECRET_KEY, every request
# would answer 500 (R-OP12). What the web writes (uploads, run folders) is private to its user.
start_process()
django.setup(set_prefix=False)  # what get_asgi_application() does before it makes its own handler


class ReusedThreadsASGIHandler(ASGIHandler):
    """Django's ASGI handler with two changes to where a request's sync code runs.

    - The middleware chain and the view run as one sync call on the request's thread. Django's
      own handler builds the chain in async mode: with sync middleware and sync views, that went
      from the thread back to the event loop and out to the thread again in every request. An
      empty request took 0.4 ms less CPU this way (1.1 ms instead of 1.5).
    - That thread is kept from an earlier request instead of made and joined for this one alone:
      an empty request took 2.1 ms over HTTP, 1.7 ms this way. One request per thread at a time.

    Body reading, disconnects and streaming (also of async iterators) stay Django's."""

    max_idle_threads = 16

    def __init__(self) -> None:
        BaseHandler.__init__(self)  # not ASGIHandler's, which loads the middleware in async mode
        self.load_middleware(is_async=False)
        self._idle: list[ThreadPoolExecutor] = []  # touched only on the event loop's thread

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response)(request)  # thread-sensitive: the request's thread

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._idle.pop() if self._idle else ThreadPoolExecutor(max_workers=1)
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            if len(self._idle) < self.max_idle_threads:
                self._idle.append(executor)
            else:
                executor.submit(connections.close_all)  # its thread's, kept on SQLite (settings)
                executor.shutdown(wait=False)


django_asgi = ReusedThreadsASGIHandler()

from channels.routing import ProtocolTypeRouter  # noqa: E402  (needs Django set up)

from live.routing import websocket_application  # noqa: E402
from live.shutdown import install_in_daphne  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi, "websocket": websocket_application})
install_in_daphne()  # a stopping web process closes its websockets with 1001 (R-OP10)

# The cyclic collector's youngest generation is collected after 50,000 new objects instead of 700:
# with a thousand live connections a web process holds some 400,000 objects, and the full passes
# that promotions out of a small young generation brought on every few seconds took 0.3-0.5 s each,
# during which no socket or stream was served (bench.crowd: the p99 of a run event's fan-out went
# from 0.6-0.9 s to about 0.2 s, with no full pass left in its rounds). Short-lived objects now die
# before they are promoted; a full pass still costs as much when one comes. (`manage.py serve` imports
# this module before it forks, so its worker collects the same way.)
gc.set_threshold(50_000)
