"""Webhook and question email attempts run on a small thread pool inside each cluster worker
process.

The django-q2 task only hands the row over and returns, so a receiver or mail server that is slow
or dead holds a sender thread for at most its timeout, never a cluster worker that turns need, and
never the other rows (each has a thread of its own). If the worker process dies meanwhile, the
row's lease lapses and the supervisor offers it again (at least once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import connections

logger = logging.getLogger(__name__)

SENDER_THREADS = 8


class _Sender:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._busy = 0

    def submit(self, attempt: Callable[[int], object], pk: int) -> bool:
        """Start `attempt(pk)`; False when every thread is busy (the row stays due and is offered
        again by the supervisor)."""
        with self._lock:
            if self._busy >= SENDER_THREADS:
                return False
            self._busy += 1
            if self._pool is None:  # created in the worker process itself, after the fork
                self._pool = ThreadPoolExecutor(SENDER_THREADS, thread_name_prefix="webhook-sender")
        self._pool.submit(self._attempt, attempt, pk)
        return True

    def _attempt(self, attempt: Callable[[int], object], pk: int) -> None:
        try:
            attempt(pk)
        except Exception:  # logged and left to the lease: the supervisor offers it again
            logger.exception("%s of %s failed unexpectedly", attempt.__qualname__, pk)
        finally:
            # An idle sender thread holds no connection (the worker keeps its connections open
            # otherwise, and eight idle threads a process would hold eight).
            connections.close_all()
            with self._lock:
                self._busy -= 1


sender = _Sender()
