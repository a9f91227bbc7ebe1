"""`serve` and `worker` start once more before their imports, without glibc's per-thread caches
(processes.memory.restart_without_thread_caches), and every process they fork keeps that."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import children
from tests.support.service_processes import ServiceProcesses

NO_THREAD_CACHES = b"GLIBC_TUNABLES=glibc.malloc.tcache_count=0"


def _environment(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


@pytest.mark.timeout(120)
def test_serve_and_a_worker_alone_run_every_process_without_thread_caches(tmp_path):
    live = ServiceProcesses(tmp_path / "data")
    try:
        serve = live.start_serve()
        live.wait_until(lambda: live._ping() == 204, 60, "the service to answer")
        live.wait_until_worker_serves("serve")
        web, worker = children(serve.pid)  # forked in this order
        alone = live.start_tree("worker")  # as README's "Scaling out" runs one
        live.wait_until_worker_serves("worker")
        for pid in [serve.pid, web, worker, *children(worker), alone.pid, *children(alone.pid)]:
            assert NO_THREAD_CACHES in _environment(pid), pid
    finally:
        live.stop()
