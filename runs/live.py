"""Waiting for a run's next events (R-UI1, R-UI2).

With a cross-process channel layer (Redis) the committing process wakes listeners through the
layer. The embedded default has only the in-memory layer, which a worker process cannot reach, so
each web process runs one watcher that tails the event table and wakes its own listeners through
the in-memory layer: one cheap query per interval, however many sockets and streams are open.
Either way the event table stays the only source of what is sent.
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection
from django.db.models import Max

from .events import group_name, user_group_name
from .models import RunEvent

logger = logging.getLogger(__name__)

WATCH_INTERVAL_SECONDS = 0.02
# Listeners still re-read the table now and then, so a missed wake-up only costs this much.
SAFETY_POLL_SECONDS = 2.0


def cross_process(layer) -> bool:
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


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
        connection.close()  # reconnect on the next call, after the database comes back
        raise


class EventTableWatcher:
    """One per event loop of a web process on the embedded default, alive while anyone listens."""

    _tasks: dict[int, asyncio.Task] = {}
    listeners = 0

    @classmethod
    def ensure_running(cls, layer) -> None:
        loop = asyncio.get_running_loop()
        task = cls._tasks.get(id(loop))
        if task is None or task.done():
            cls._tasks[id(loop)] = loop.create_task(cls._watch(layer))

    @staticmethod
    async def _watch(layer) -> None:
        last_id = await sync_to_async(_latest_event_id, thread_sensitive=False)()
        while EventTableWatcher.listeners > 0:
            await asyncio.sleep(WATCH_INTERVAL_SECONDS)
            try:
                rows = await sync_to_async(_events_since, thread_sensitive=False)(last_id)
            except Exception:  # the database may be briefly away; listeners poll meanwhile
                logger.warning("event watcher could not read the event table", exc_info=True)
                await asyncio.sleep(SAFETY_POLL_SECONDS)
                continue
            if not rows:
                continue
            last_id = rows[-1][0]
            changed = dict.fromkeys(group_name(run_id) for _, run_id, _, _ in rows)
            # A user's listeners (the inbox) care about status changes only.
            changed.update(dict.fromkeys(user_group_name(owner) for _, _, owner, kind in rows if kind == "status"))
            for group in changed:
                await layer.group_send(group, {"type": "run.changed"})


class ChangeWaiter:
    """Wakes on changes to the runs of one group: one run, or all runs of one user."""

    def __init__(self, group: str):
        self.group = group
        self.layer = get_channel_layer()
        self.channel: str | None = None

    async def __aenter__(self) -> ChangeWaiter:
        if self.layer is not None:
            if not cross_process(self.layer):
                EventTableWatcher.listeners += 1
                EventTableWatcher.ensure_running(self.layer)
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, self.channel)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.channel is not None:
            await self.layer.group_discard(self.group, self.channel)
            if not cross_process(self.layer):
                EventTableWatcher.listeners -= 1

    async def wait(self) -> None:
        """Return on a change notification, or after the safety interval, whichever comes first."""
        if self.channel is None:
            await asyncio.sleep(WATCH_INTERVAL_SECONDS * 10)
            return
        try:
            await asyncio.wait_for(self.layer.receive(self.channel), timeout=SAFETY_POLL_SECONDS)
        except TimeoutError:
            pass


class RunChangeWaiter(ChangeWaiter):
    def __init__(self, request_id):
        super().__init__(group_name(request_id))


class UserChangeWaiter(ChangeWaiter):
    def __init__(self, user_id):
        super().__init__(user_group_name(user_id))
