"""Channel-layer group messages sent from sync code: best effort, never waited for.

`async_to_sync(layer.group_send)` made a new event loop and thread for every message, and so a
new Redis connection (channels-redis pools its connections per loop): about 1.7 ms of the
caller's time each, four times per engine turn. Here each process keeps one loop in a daemon
thread; a message is handed to it and the caller goes on. Messages handed over before the loop
got to them are sent once each (a turn's events wake a run's listeners once, not four times).
Listeners never depend on a message arriving: they re-read the database now and then anyway.

On the embedded default there is no cross-process layer, and every process runs on one host: a
message is one datagram of its type to each event loop listening there (live.watcher), which reads
the event table to learn what changed.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

from .wakeups import broadcast

logger = logging.getLogger(__name__)

DRAIN_AT_EXIT_SECONDS = 1.0
# The wake-up topic of the processes that follow runs on this host (processes.wakeups.broadcast).
LIVE_TOPIC = "live"


class _Sender:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A fresh state; also in a forked child, where the loop's thread does not exist and the
        lock may have been held at the fork."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}
        self._flushing: Future | None = None

    def send(self, messages: Iterable[tuple[str, dict[str, Any]]]) -> None:
        with self._lock:
            start_flush = not self._pending
            for group, message in messages:
                self._pending[(group, message["type"])] = message
            if start_flush and self._pending:
                self._flushing = asyncio.run_coroutine_threadsafe(self._flush(), self._running_loop())

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="group-messages", daemon=True).start()
        return self._loop

    async def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        layer = get_channel_layer()
        for (group, _), message in pending.items():
            try:
                await layer.group_send(group, message)
            except Exception:  # a broken channel layer must never fail what the caller did
                logger.warning("could not send %s to %s", message["type"], group, exc_info=True)

    def drain(self, timeout: float) -> None:
        """Wait a little for messages still being sent (at exit: a daemon thread just stops)."""
        flushing = self._flushing
        if flushing is not None:
            try:
                flushing.result(timeout)
            except Exception:
                logger.warning("group messages still unsent at exit", exc_info=True)


_sender = _Sender()
os.register_at_fork(after_in_child=lambda: _sender.reset())
atexit.register(lambda: _sender.drain(DRAIN_AT_EXIT_SECONDS))


def send_to_groups(messages: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """Send each (group, message) through the cross-process channel layer. The message names its
    group: a web process listens with one channel in many groups (live.watcher). Without that layer,
    each listening loop on this host gets the message's type only."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        for kind in dict.fromkeys(message["type"] for _, message in messages):
            broadcast(LIVE_TOPIC, kind.encode())
        return
    _sender.send((group, {**message, "group": group}) for group, message in messages)
