"""The inbox's socket `/ws/inbox/` (R-NT4): the questions waiting for the current user, their
count kept live on every page. How each question is shown, and the answers given in the inbox,
are `runs.questions`.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from accounts.connections import ENDED
from runs import selectors
from runs.questions import question_summary

from .consumers import CLOSE_INTERNAL_ERROR, LiveConnectionConsumer, current_user
from .watcher import UserChangeWaiter

logger = logging.getLogger(__name__)

# The socket lists at most this many questions (the count is always exact).
LISTED_QUESTIONS = 100


def inbox_message(user) -> dict[str, Any]:
    questions = selectors.waiting_questions(current_user(user))
    return {
        "type": "inbox",
        "count": questions.count(),
        "questions": [question_summary(item) for item in questions[:LISTED_QUESTIONS]],
    }


class InboxConsumer(LiveConnectionConsumer):
    """Server → client only: `{"type": "inbox", "count", "questions"}` now and after each change."""

    async def connect(self) -> None:
        if await self.open_live_connection():
            self.tail_task = asyncio.create_task(self.tail(self.scope["user"]))

    async def tail(self, user) -> None:
        last: dict[str, Any] | None = None
        try:
            async with UserChangeWaiter(user.pk, self.connection) as waiter:
                while True:
                    # Subscribed before this read, so a change committed meanwhile wakes the next wait.
                    message = await waiter.read(("inbox", user.pk), partial(inbox_message, user))
                    if message != last:
                        await self.send_json(message)
                        last = message
                    if await waiter.wait() == ENDED:
                        await self.end_for_credential()
                        return
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("inbox socket of user %s stopped", user.pk)
            await self.close(code=CLOSE_INTERNAL_ERROR)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        pass  # answers go over HTTP (the inbox form); nothing a client sends here means anything
