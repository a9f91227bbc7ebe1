"""processes.memory.TrimWhenIdle: the allocator's free memory goes back once the process has
been idle a while, once however often it became idle meanwhile, and never while it is busy."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from processes import memory


@pytest.fixture
def trims(monkeypatch):
    done = threading.Semaphore(0)
    calls: list[float] = []

    def recorded() -> None:
        calls.append(time.monotonic())
        done.release()

    monkeypatch.setattr(memory, "_malloc_trim", recorded)
    return calls, done


def test_the_memory_goes_back_once_after_the_process_stays_idle(trims):
    calls, done = trims
    trim = memory.TrimWhenIdle(lambda: True, after=0.05)
    asked = time.monotonic()
    for _ in range(5):  # a burst's threads finding the queue empty one after the other
        trim.soon()
    assert done.acquire(timeout=5)
    time.sleep(0.2)
    assert len(calls) == 1 and calls[0] - asked >= 0.05
    trim.soon()  # idle again later: another trim
    assert done.acquire(timeout=5) and len(calls) == 2


def test_a_process_busy_again_by_then_keeps_its_memory(trims):
    calls, done = trims
    busy = threading.Event()
    busy.set()
    trim = memory.TrimWhenIdle(lambda: not busy.is_set(), after=0.05)
    trim.soon()
    assert not done.acquire(timeout=0.3) and calls == []
    busy.clear()
    trim.soon()  # the decision before was made and released: it can be asked again
    assert done.acquire(timeout=5) and len(calls) == 1


def resident_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_the_trim_gives_back_free_pages_amid_the_heap():
    """What glibc leaves resident after a burst: pages freed below memory still in use."""
    blocks = [bytes(2000) for _ in range(40_000)]  # about 80 MiB from malloc's heap, not mmap
    del blocks[:30_000]  # the lower 60 MiB freed; the rest keeps the heap's top where it is
    before = resident_mib()
    memory._malloc_trim()
    assert before - resident_mib() > 20, (before, resident_mib())
    assert len(blocks) == 10_000
