"""Waiting for a run's next events (R-UI1, R-UI2), and keeping this process's live connections
(R-FS2, R-FS3).

A listener waits on a channel-layer channel of its own and reads the event table only when woken,
so an idle socket or stream costs no query at all. With a cross-process channel layer (Redis) the
committing process wakes listeners through the layer. Besides, each web process runs one watcher
per event loop while anyone listens, one query per interval however many listen: it tails the
event table and wakes its own listeners of the runs that changed (every WATCH_INTERVAL_SECONDS on
the embedded default, whose in-memory layer a worker process cannot reach; every
SAFETY_POLL_SECONDS with Redis, so a lost wake-up costs that much at most), renews this process's
live connections and ends those whose credential was revoked (accounts.connections).
The event table stays the only source of what is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection as db_connection
from django.db.models import Max

from accounts.connections import ENDED, RENEW_SECONDS, credential_group, keep_connections
from accounts.models import LiveConnection

from .events import group_name, user_group_name
from .models import RunEvent

logger = logging.getLogger(__name__)

CHANGED = "run.changed"
WATCH_INTERVAL_SECONDS = 0.02
SAFETY_POLL_SECONDS = 2.0
# Without a cross-process layer nobody tells this process that a credential ended: it looks this often.
CONNECTION_CHECK_SECONDS = 1.0


def cross_process(layer) -> bool:
    return not isinstance(layer, InMemoryChannelLayer)


def _latest_event_id() -> int:
    return RunEvent.objects.aggregate(latest=Max("id"))["latest"] or 0


def _events_since(last_id: int) -> list[tuple[int, object, int, str]]:
    try:
        return list(
            RunEvent.objects.filter(id__gt=last_id)
            .order_by("id")
            .values_list("id", "run_id", "run__owner_id", "kind")[:1000]
        )
    except Exception:
        db_connection.close()  # reconnect on the next call, after the database comes back
        raise


def _changed_groups(rows: list[tuple[int, object, int, str]]) -> list[str]:
    changed = dict.fromkeys(group_name(run_id) for _, run_id, _, _ in rows)
    # A user's listeners (the inbox) care about status changes only.
    changed.update(dict.fromkeys(user_group_name(owner) for _, _, owner, kind in rows if kind == "status"))
    return list(changed)


# The watchers' queries run on one thread of their own: one database connection per web process,
# closed whenever nobody listens (a pool of threads would keep one open in each).
_WATCHER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-watcher")


def _close_database_connection() -> None:
    db_connection.close()  # the connection of the thread this runs in


def _in_thread(function):
    return sync_to_async(function, thread_sensitive=False, executor=_WATCHER_THREAD)


class ProcessWatcher:
    """The listeners of one event loop of a web process, and the task that watches for them."""

    # By the loop itself: a new loop may reuse a closed one's id (tests run several in turn).
    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ProcessWatcher] = weakref.WeakKeyDictionary()

    def __init__(self, layer):
        self.layer = layer
        self.listeners: defaultdict[str, set[str]] = defaultdict(set)  # group -> channels
        self.connections: dict[UUID, str] = {}  # live connection -> its listener's channel
        self.task: asyncio.Task | None = None
        self.starting = asyncio.Lock()

    @classmethod
    def of_this_loop(cls, layer) -> ProcessWatcher:
        loop = asyncio.get_running_loop()
        watcher = cls._by_loop.get(loop)
        if watcher is None or watcher.layer is not layer:
            watcher = cls._by_loop[loop] = cls(layer)
        return watcher

    async def add(self, channel: str, groups: list[str], connection_id: UUID | None) -> None:
        """Returns once the watcher runs: events committed from then on wake `channel`."""
        for group in groups:
            self.listeners[group].add(channel)
        if connection_id is not None:
            self.connections[connection_id] = channel
        async with self.starting:
            if self.task is None or self.task.done():
                last_id = await _in_thread(_latest_event_id)()
                self.task = asyncio.get_running_loop().create_task(self._watch(last_id))

    def discard(self, channel: str, groups: list[str], connection_id: UUID | None) -> None:
        for group in groups:
            self.listeners[group].discard(channel)
            if not self.listeners[group]:
                del self.listeners[group]
        self.connections.pop(connection_id, None)  # type: ignore[arg-type]

    async def _watch(self, last_id: int) -> None:
        local_only = not cross_process(self.layer)
        interval = WATCH_INTERVAL_SECONDS if local_only else SAFETY_POLL_SECONDS
        check_every = CONNECTION_CHECK_SECONDS if local_only else RENEW_SECONDS
        next_check = next_renewal = time.monotonic() + check_every
        try:
            while self.listeners:
                try:
                    await asyncio.sleep(interval)
                    rows = await _in_thread(_events_since)(last_id)
                    if rows:
                        last_id = rows[-1][0]
                        for group in _changed_groups(rows):
                            await self._tell(self.listeners.get(group, ()), CHANGED)
                    now = time.monotonic()
                    if now >= next_check and self.connections:
                        renew = now >= next_renewal
                        held = list(self.connections)
                        alive = await _in_thread(keep_connections)(held, renew=renew)
                        ended = [self.connections[id] for id in held if id not in alive and id in self.connections]
                        await self._tell(ended, ENDED)
                        next_check = now + check_every
                        if renew:
                            next_renewal = now + RENEW_SECONDS
                except Exception:  # the database may be briefly away; listeners wait meanwhile
                    logger.warning("the live connection watcher could not read the database", exc_info=True)
                    await asyncio.sleep(SAFETY_POLL_SECONDS)
            self.task = None  # before the await below: a listener arriving meanwhile starts a new watcher
        finally:
            # Not awaited: this also runs when the loop shuts down and cancels the watcher.
            _WATCHER_THREAD.submit(_close_database_connection)

    async def _tell(self, channels, kind: str) -> None:
        for channel in list(channels):
            try:
                await self.layer.send(channel, {"type": kind})
            except Exception:  # a full channel has wake-ups pending already
                logger.debug("could not wake %s", channel, exc_info=True)


class ChangeWaiter:
    """Wakes on changes to the runs of one group (one run, or all runs of one user), and when the
    credential of `connection` ends."""

    def __init__(self, group: str, connection: LiveConnection | None = None):
        credential = credential_group(connection) if connection is not None else None
        self.groups = [group] + ([credential] if credential else [])
        self.connection_id = connection.pk if connection is not None else None
        self.layer = get_channel_layer()
        self.channel = ""

    async def __aenter__(self) -> ChangeWaiter:
        self.channel = await self.layer.new_channel()
        for group in self.groups:
            await self.layer.group_add(group, self.channel)
        self.watcher = ProcessWatcher.of_this_loop(self.layer)
        try:
            await self.watcher.add(self.channel, self.groups, self.connection_id)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        self.watcher.discard(self.channel, self.groups, self.connection_id)
        for group in self.groups:
            await self.layer.group_discard(group, self.channel)

    async def wait(self, timeout: float | None = None) -> str | None:
        """The next notification: CHANGED, or ENDED once the connection's credential ended; None
        after `timeout` seconds without one."""
        try:
            message = await asyncio.wait_for(self.layer.receive(self.channel), timeout=timeout)
        except TimeoutError:
            return None
        return message["type"]


class RunChangeWaiter(ChangeWaiter):
    def __init__(self, request_id, connection: LiveConnection | None = None):
        super().__init__(group_name(request_id), connection)


class UserChangeWaiter(ChangeWaiter):
    def __init__(self, user_id, connection: LiveConnection | None = None):
        super().__init__(user_group_name(user_id), connection)
