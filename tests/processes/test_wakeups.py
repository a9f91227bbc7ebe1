"""processes.wakeups: a waiter ends its wait when another process wakes its name, on the
embedded default (datagram sockets under the data dir) and with Redis (run again with REDIS_URL)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from processes import wakeups


@pytest.fixture
def name() -> str:
    return f"test-{uuid.uuid4().hex}"


def test_a_wakeup_sent_before_the_wait_is_not_lost(name):
    with wakeups.Listener(name) as listener:
        wakeups.wake(name)
        wakeups.wake(name)
        assert listener.wait(timeout=5) is True
        assert listener.wait(timeout=0.05) is False  # one wait used up both


def test_a_wait_nobody_ends_times_out(name):
    with wakeups.Listener(name) as listener:
        began = time.monotonic()
        assert listener.wait(timeout=0.3) is False
        assert time.monotonic() - began >= 0.25


def test_waking_a_name_nobody_listens_under_does_nothing(name):
    wakeups.wake(name)
    with wakeups.Listener(name) as listener:
        assert listener.wait(timeout=0.05) is False  # nothing was kept for a later waiter


def test_another_process_wakes_the_waiter(name, settings):
    """The waker is a process of its own, as a web process answering a worker's run is."""
    code = "import django, sys; django.setup(); from processes import wakeups; wakeups.wake(sys.argv[1])"
    environment = {**os.environ, "SKILLRUNNER_DATA_DIR": str(settings.DATA_DIR)}
    # Its REDIS_URL is this process's already: without the xdist worker's name, tests.settings
    # does not move it to another database a second time.
    environment.pop("PYTEST_XDIST_WORKER", None)
    with wakeups.Listener(name) as listener:
        subprocess.run([sys.executable, "-c", code, name], check=True, timeout=60, env=environment)
        assert listener.wait(timeout=10) is True
