"""Waiting for something another thread or process does, without spending a core on asking.

A poll is rarely free: a GET through the test client or to a service process costs milliseconds of
CPU in this process and the service's, and with both passes of `make test` on two cores every
idle core counts. So the pause between polls grows from `FIRST_PAUSE` to `LONGEST_PAUSE` (what a wait
can overshoot by), unless the caller fixes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FIRST_PAUSE = 0.02
LONGEST_PAUSE = 0.2
GROWTH = 1.5


def poll(predicate: Callable[[], T], timeout: float, interval: float | None = None) -> T:
    """Call `predicate` until it returns something truthy or `timeout` seconds have passed; its
    last value. `interval`, when given, is a fixed pause instead of the growing one."""
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE if interval is None else interval
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        if interval is None:
            pause = min(pause * GROWTH, LONGEST_PAUSE)
