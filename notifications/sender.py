"""Webhook attempts run on a small thread pool inside each cluster worker process.

The django-q2 task only hands the delivery over and returns, so a receiver that is slow or dead
holds a sender thread for at most its timeout, never a cluster worker that turns need, and never
the other deliveries (each has a thread of its own). If the worker process dies meanwhile, the
delivery's lease lapses and the supervisor offers it again (at least once).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from django.db import connections

from .services import attempt_delivery

logger = logging.getLogger(__name__)

SENDER_THREADS = 8


class _Sender:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._busy = 0

    def submit(self, delivery_pk: int) -> bool:
        """Start an attempt; False when every thread is busy (the delivery stays due and is
        offered again by the supervisor)."""
        with self._lock:
            if self._busy >= SENDER_THREADS:
                return False
            self._busy += 1
            if self._pool is None:  # created in the worker process itself, after the fork
                self._pool = ThreadPoolExecutor(SENDER_THREADS, thread_name_prefix="webhook-sender")
        self._pool.submit(self._attempt, delivery_pk)
        return True

    def _attempt(self, delivery_pk: int) -> None:
        try:
            attempt_delivery(delivery_pk)
        except Exception:  # logged and left to the lease: the supervisor offers it again
            logger.exception("webhook delivery %s failed unexpectedly", delivery_pk)
        finally:
            # An idle sender thread holds no connection (the worker keeps its connections open
            # otherwise, and eight idle threads a process would hold eight).
            connections.close_all()
            with self._lock:
                self._busy -= 1


sender = _Sender()
