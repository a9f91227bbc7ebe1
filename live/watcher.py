"""Waiting for a run's next events (R-UI1, R-UI2), and keeping this process's live connections
(R-FS2, R-FS3).

A listener waits to be woken and reads the event table only then, so an idle socket or stream
costs no query at all. With a cross-process channel layer (Redis) the committing process wakes
listeners through the layer, one message per web process and run (ProcessWatcher). On the embedded
default, whose in-memory layer another process cannot reach, it sends a datagram to each event loop
on the host that follows runs (processes.group_messages). Besides, each web process runs one
watcher per event loop while anyone listens: woken so, it tails the event table, one query however
many listen, and wakes its own listeners of the runs that changed; it also looks every
SAFETY_POLL_SECONDS, so a lost wake-up costs that much at most. It renews this process's live
connections and ends those whose credential was revoked (accounts.connections).
The event table stays the only source of what is sent. Listeners woken together read it together:
one query per run serves every listener of that run in the process (ProcessWatcher.read), so an
event costs the same few queries whether one or a thousand follow the run (R-SC2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Self, TypeVar
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection as db_connection
from django.db.models import Max, Q

from accounts.connections import ENDED, RENEW_SECONDS, credential_group, keep_connections
from accounts.models import LiveConnection
from kernel.compiled import one_or_none
from processes.group_messages import LIVE_TOPIC
from processes.wakeups import listen_on_host, stop_listening_on_host
from runs.events import group_name, user_group_name
from runs.models import Run, RunEvent
from runs.selectors import EVENT_PAGE_LIMIT

logger = logging.getLogger(__name__)

CHANGED = "run.changed"
SAFETY_POLL_SECONDS = 2.0
# Without a socket to be woken on (the embedded default, a data dir it cannot write to) it looks this often.
BLIND_WATCH_SECONDS = 0.02


def cross_process(layer) -> bool:
    return not isinstance(layer, InMemoryChannelLayer)


def _latest_event_id() -> int:
    return RunEvent.objects.aggregate(latest=Max("id"))["latest"] or 0


def _events_since(last_id: int, missing: list[int]) -> list[tuple[int, object, int, str]]:
    return list(
        RunEvent.objects.filter(Q(id__gt=last_id) | Q(id__in=missing))  # an empty IN drops out of the SQL
        .order_by("id")
        .values_list("id", "run_id", "run__owner_id", "kind")[:1000]
    )


class EventTail:
    """Where the watcher's reading of the event table stands: the last id read, and the ids below
    it not read yet.

    On PostgreSQL an event's id is taken when its row is inserted, not when it commits: a
    transaction holding 101 may commit after another's 102, which the tail has read by then. The
    tail looks for such ids again for MISSING_SECONDS, longer than any transaction that appends
    events holds one (an insert rolled back leaves its id unused for good). Without it, a run whose
    channel-layer wake-up was lost too waited for its next event."""

    MISSING_SECONDS = 30.0
    MISSING_AT_MOST = 1000

    def __init__(self, last_id: int) -> None:
        self.last_id = last_id
        self.missing: dict[int, float] = {}  # id -> until when it is looked for (time.monotonic())

    def looked_for(self, now: float) -> list[int]:
        self.missing = {event_id: until for event_id, until in self.missing.items() if until > now}
        return sorted(self.missing)

    def read(self, ids: list[int], now: float) -> None:
        """`ids` were read, in order: those they skip past are missing until they come (the
        nearest MISSING_AT_MOST of a longer run of ids, which no set of open transactions holds)."""
        for event_id in ids:
            self.missing.pop(event_id, None)
            if event_id > self.last_id:
                skipped = range(max(self.last_id + 1, event_id - self.MISSING_AT_MOST), event_id)
                self.missing.update(dict.fromkeys(skipped, now + self.MISSING_SECONDS))
                self.last_id = event_id


def status_and_events(request_id, cursor: int) -> tuple[str | None, list[RunEvent]]:
    """The run's status (None once it is gone), then its events after `cursor`, a page at most.

    The status first: a run read as terminal has committed its last event with that status, so
    the events read next include it. Read the other way round, a run ending between the reads
    looked terminal with its last events unread, and a stream ended without them."""
    status = one_or_none(Run.objects.filter(pk=request_id).values_list("status", flat=True))
    events = list(RunEvent.objects.filter(run_id=request_id, seq__gt=cursor).order_by("seq")[:EVENT_PAGE_LIMIT])
    return status, events


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


T = TypeVar("T")


def _in_thread(function: Callable[..., T]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return function(*args, **kwargs)
        except Exception:
            db_connection.close()  # reconnect on the next call, after the database comes back
            raise

    return sync_to_async(call, thread_sensitive=False, executor=_WATCHER_THREAD)


def _retrieve(future: asyncio.Future) -> None:
    """A shared read's error reaches every listener still waiting; with none left, it is dropped
    here instead of logged as never retrieved."""
    if not future.cancelled():
        future.exception()


class ProcessWatcher:
    """The listeners of one event loop of a web process, and the tasks that watch for them.

    Listeners are woken here, in memory. With a cross-process layer the loop has one channel of its
    own, in each group that one of its listeners follows; a message to a group (it names the group)
    wakes the loop's listeners of that group. Each listener used to have a channel of its own in
    the layer: a run event was one message per listener, and with Redis each took a round trip."""

    # By the loop itself: a new loop may reuse a closed one's id (tests run several in turn).
    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ProcessWatcher] = weakref.WeakKeyDictionary()

    def __init__(self, layer):
        self.layer = layer
        self.cross_process = cross_process(layer)
        self.listeners: defaultdict[str, set[ChangeWaiter]] = defaultdict(set)  # by group
        self.connections: dict[UUID, ChangeWaiter] = {}  # by the live connection it serves
        self.task: asyncio.Task | None = None
        self.starting = asyncio.Lock()
        self.channel = ""  # with a cross-process layer: this loop's, once it has had a listener
        self.joined: dict[str, float] = {}  # group -> when the channel joined it (time.monotonic())
        self.membership = asyncio.Lock()
        self.reads: dict[Hashable, asyncio.Future] = {}  # reads not started yet, by what they read
        self.reading: set[asyncio.Task] = set()

    @classmethod
    def of_this_loop(cls, layer) -> ProcessWatcher:
        loop = asyncio.get_running_loop()
        watcher = cls._by_loop.get(loop)
        if watcher is None or watcher.layer is not layer:
            watcher = cls._by_loop[loop] = cls(layer)
        return watcher

    async def add(self, waiter: ChangeWaiter) -> None:
        """Returns once the watcher runs and this loop follows the waiter's groups: events
        committed from then on wake `waiter`."""
        for group in waiter.groups:
            self.listeners[group].add(waiter)
        if waiter.connection_id is not None:
            self.connections[waiter.connection_id] = waiter
        async with self.starting:
            if self.cross_process and not self.channel:
                self.channel = await self.layer.new_channel()
            if self.task is None or self.task.done():
                # Listening before reading where the table ends: nothing committed after is missed.
                host_wakeups = None if self.cross_process else HostWakeups()
                try:
                    last_id = await _in_thread(_latest_event_id)()
                except BaseException:
                    if host_wakeups is not None:
                        host_wakeups.close()
                    raise
                self.task = asyncio.get_running_loop().create_task(self._watch(last_id, host_wakeups))
        await self._follow(waiter.groups)

    async def discard(self, waiter: ChangeWaiter) -> None:
        for group in waiter.groups:
            self.listeners[group].discard(waiter)
            if not self.listeners[group]:
                del self.listeners[group]
        if waiter.connection_id is not None and self.connections.get(waiter.connection_id) is waiter:
            del self.connections[waiter.connection_id]
        await self._follow(waiter.groups)

    async def _follow(self, groups: list[str]) -> None:
        """Join or leave each of `groups` as this loop's listeners now need (cross-process only).
        Decided under one lock from the listeners of the moment, so a group left by its last
        listener while a new one arrives ends up joined."""
        if not self.cross_process:
            return
        async with self.membership:
            for group in groups:
                if group in self.listeners and group not in self.joined:
                    await self.layer.group_add(group, self.channel)
                    self.joined[group] = time.monotonic()
                elif group not in self.listeners and group in self.joined:
                    del self.joined[group]
                    await self.layer.group_discard(group, self.channel)

    async def _rejoin_old_groups(self) -> None:
        """The layer drops a membership after its group_expiry (a day by default): join again
        halfway through."""
        expiry = getattr(self.layer, "group_expiry", 86400)
        async with self.membership:
            for group, joined_at in list(self.joined.items()):
                if time.monotonic() - joined_at > expiry / 2:
                    await self.layer.group_add(group, self.channel)
                    self.joined[group] = time.monotonic()

    async def read(self, key: Hashable, read: Callable[[], T]) -> T:
        """`read()` on the watcher's thread, made once for all of this loop's callers asking for
        the same `key` before it starts. The listeners of a run wake together; each reading the
        table for itself, one event cost a query per listener. The read starts after this call,
        so it sees whatever woke the caller."""
        future = self.reads.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            future = self.reads[key] = loop.create_future()
            future.add_done_callback(_retrieve)
            task = loop.create_task(self._read(key, read, future))  # runs after the callers woken with this one
            self.reading.add(task)
            task.add_done_callback(self.reading.discard)
        return await asyncio.shield(future)

    async def _read(self, key: Hashable, read: Callable[[], T], future: asyncio.Future) -> None:
        del self.reads[key]  # a caller from now on may have been woken by what this read misses
        try:
            future.set_result(await _in_thread(read)())
        except Exception as error:
            future.set_exception(error)

    async def _watch(self, last_id: int, host_wakeups: HostWakeups | None) -> None:
        tail = EventTail(last_id)
        next_renewal = time.monotonic() + RENEW_SECONDS
        pump = asyncio.get_running_loop().create_task(self._pump()) if self.cross_process else None
        try:
            while self.listeners:
                try:
                    if host_wakeups is None:
                        await asyncio.sleep(SAFETY_POLL_SECONDS)
                        kinds: set[str] = set()
                    else:
                        kinds = await host_wakeups.wait(SAFETY_POLL_SECONDS)
                    rows = await _in_thread(_events_since)(tail.last_id, tail.looked_for(time.monotonic()))
                    if rows:
                        tail.read([row[0] for row in rows], time.monotonic())
                        for group in _changed_groups(rows):
                            self._tell(self.listeners.get(group, ()), CHANGED)
                    now = time.monotonic()
                    renew = now >= next_renewal
                    if self.connections and (renew or ENDED in kinds):
                        held = list(self.connections)
                        alive = await _in_thread(keep_connections)(held, renew=renew)
                        self._tell(
                            [self.connections[id] for id in held if id not in alive and id in self.connections], ENDED
                        )
                    if renew:
                        next_renewal = now + RENEW_SECONDS
                        await self._rejoin_old_groups()
                except Exception:  # the database may be briefly away; listeners wait meanwhile
                    logger.warning("the live connection watcher could not read the database", exc_info=True)
                    await asyncio.sleep(SAFETY_POLL_SECONDS)
            self.task = None  # before the await below: a listener arriving meanwhile starts a new watcher
        finally:
            if pump is not None:
                pump.cancel()
            if host_wakeups is not None:
                host_wakeups.close()
            # Not awaited: this also runs when the loop shuts down and cancels the watcher.
            _WATCHER_THREAD.submit(_close_database_connection)

    async def _pump(self) -> None:
        """Wake-ups from other processes (processes.group_messages names the group in each)."""
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # the layer may be briefly away: the safety poll covers meanwhile
                logger.warning("the live connection watcher could not read the channel layer", exc_info=True)
                await asyncio.sleep(SAFETY_POLL_SECONDS)
                continue
            if message.get("type") in (CHANGED, ENDED):
                self._tell(self.listeners.get(message.get("group", ""), ()), message["type"])

    @staticmethod
    def _tell(waiters, kind: str) -> None:
        for waiter in list(waiters):
            waiter.notify(kind)


class HostWakeups:
    """The wake-ups of one watcher on the embedded default: a datagram socket that every process
    on the host sends the type of each group message to (processes.group_messages)."""

    def __init__(self) -> None:
        self.name = f"{os.getpid()}-{id(self)}"
        self.socket: socket.socket | None = None
        self.next_blind_check = 0.0
        try:
            self.socket = listen_on_host(LIVE_TOPIC, self.name)
            self.socket.setblocking(False)
        except OSError:
            logger.warning("no wake-up socket: the live watcher looks every %.2fs", BLIND_WATCH_SECONDS, exc_info=True)

    async def wait(self, timeout: float) -> set[str]:
        """The kinds of message that came within `timeout` seconds, each one used up."""
        if self.socket is None:  # nothing says that a credential ended either: look once a second
            await asyncio.sleep(BLIND_WATCH_SECONDS)
            if time.monotonic() < self.next_blind_check:
                return set()
            self.next_blind_check = time.monotonic() + 1.0
            return {ENDED}
        try:
            received = [await asyncio.wait_for(asyncio.get_running_loop().sock_recv(self.socket, 64), timeout)]
        except TimeoutError:
            return set()
        with contextlib.suppress(BlockingIOError):
            while True:  # drain: the read that follows covers every wake-up before it
                received.append(self.socket.recv(64))
        return {kind.decode(errors="replace") for kind in received}

    def close(self) -> None:
        if self.socket is not None:
            stop_listening_on_host(LIVE_TOPIC, self.name, self.socket)


class ChangeWaiter:
    """Wakes on changes to the runs of one group (one run, or all runs of one user), and when the
    credential of `connection` ends."""

    def __init__(self, group: str, connection: LiveConnection | None = None):
        credential = credential_group(connection) if connection is not None else None
        self.groups = [group] + ([credential] if credential else [])
        self.connection_id = connection.pk if connection is not None else None
        self.pending: set[str] = set()  # notifications since the last wait
        self.woken = asyncio.Event()

    async def __aenter__(self) -> Self:
        self.watcher = ProcessWatcher.of_this_loop(get_channel_layer())
        try:
            await self.watcher.add(self)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        await self.watcher.discard(self)

    def notify(self, kind: str) -> None:
        self.pending.add(kind)
        self.woken.set()

    async def read(self, key: Hashable, read: Callable[[], T]) -> T:
        """`read()`, shared with the other listeners of this process asking for `key` at the same
        moment (ProcessWatcher.read)."""
        return await self.watcher.read(key, read)

    async def wait(self, timeout: float | None = None) -> str | None:
        """The next notification: CHANGED, or ENDED once the connection's credential ended; None
        after `timeout` seconds without one. Notifications that came meanwhile count as one."""
        if not self.pending:
            try:
                await asyncio.wait_for(self.woken.wait(), timeout=timeout)
            except TimeoutError:
                return None
        kind = ENDED if ENDED in self.pending else CHANGED
        self.pending.clear()
        self.woken.clear()
        return kind


class RunChangeWaiter(ChangeWaiter):
    def __init__(self, request_id, connection: LiveConnection | None = None):
        super().__init__(group_name(request_id), connection)
        self.request_id = request_id

    async def status_and_events(self, cursor: int) -> tuple[str | None, list[RunEvent]]:
        """status_and_events of this run, read once for its listeners asking with the same cursor."""
        return await self.read(
            ("run", str(self.request_id), cursor), partial(status_and_events, self.request_id, cursor)
        )


class UserChangeWaiter(ChangeWaiter):
    def __init__(self, user_id, connection: LiveConnection | None = None):
        super().__init__(user_group_name(user_id), connection)
