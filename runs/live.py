"""Waiting for a run's next events: woken by the channel layer when one spans processes
(Redis), else by polling the event table — the table is the source either way (R-UI1)."""

from __future__ import annotations

import asyncio

from channels.layers import InMemoryChannelLayer, get_channel_layer

from .events import group_name

# Without a cross-process layer, the worker's commits are only seen by polling.
POLL_SECONDS_EMBEDDED = 0.2
POLL_SECONDS_WITH_LAYER = 5.0


class RunChangeWaiter:
    def __init__(self, request_id):
        self.group = group_name(request_id)
        self.layer = get_channel_layer()
        self.channel: str | None = None
        cross_process = self.layer is not None and not isinstance(self.layer, InMemoryChannelLayer)
        self.poll_seconds = POLL_SECONDS_WITH_LAYER if cross_process else POLL_SECONDS_EMBEDDED

    async def __aenter__(self) -> "RunChangeWaiter":
        if self.layer is not None:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, self.channel)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.channel is not None:
            await self.layer.group_discard(self.group, self.channel)

    async def wait(self) -> None:
        """Return on a change notification or after the poll interval, whichever comes first."""
        if self.channel is None:
            await asyncio.sleep(self.poll_seconds)
            return
        try:
            await asyncio.wait_for(self.layer.receive(self.channel), timeout=self.poll_seconds)
        except asyncio.TimeoutError:
            pass
