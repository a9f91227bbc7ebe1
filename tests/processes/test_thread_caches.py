"""processes.memory.restart_without_thread_caches: `serve` and `worker` run without glibc's
per-thread caches of freed blocks, whose memory no trim gives back (R-CR2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from processes import memory

REPO = Path(__file__).resolve().parents[2]
# Frees eight 200-byte blocks and prints how much of them the allocator counts free again: all of
# them without thread caches, one with (glibc caches up to seven blocks of a size per thread).
FREED = """
import ctypes, sys
from processes.memory import restart_without_thread_caches
restart_without_thread_caches(sys.orig_argv)
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(200) for _ in range(8)]
in_use = libc.mallinfo2().uordblks
for block in blocks:
    libc.free(block)
print(in_use - libc.mallinfo2().uordblks)
"""

glibc_only = pytest.mark.skipif(not os.confstr("CS_GNU_LIBC_VERSION"), reason="glibc's tunables")


def _freed(tunables: str | None) -> int:
    env = {key: value for key, value in os.environ.items() if key != memory.TUNABLES}
    if tunables is not None:
        env[memory.TUNABLES] = tunables
    done = subprocess.run(
        [sys.executable, "-c", FREED], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return int(done.stdout)


@glibc_only
def test_the_program_starts_again_without_thread_caches():
    assert _freed(None) >= 8 * 200  # every block back in the arena, none kept by the thread


@glibc_only
def test_thread_caches_the_operator_set_are_left_as_they_are():
    assert _freed(f"{memory.THREAD_CACHE}=7") < 2 * 208  # seven cached: one block went back


def test_the_operators_other_tunables_are_kept(monkeypatch):
    started: list[tuple[str, list[str]]] = []
    monkeypatch.setenv(memory.TUNABLES, "glibc.malloc.arena_max=2")
    monkeypatch.setattr(os, "execv", lambda path, argv: started.append((path, argv)))
    memory.restart_without_thread_caches(["python3", "-X", "dev", "manage.py", "serve", "--port", "8001"])
    assert os.environ[memory.TUNABLES] == f"glibc.malloc.arena_max=2:{memory.THREAD_CACHE}=0"
    # The interpreter that runs now, with the options and arguments it was given.
    assert started == [(sys.executable, [sys.executable, "-X", "dev", "manage.py", "serve", "--port", "8001"])]
    memory.restart_without_thread_caches(["python3", "manage.py", "serve"])
    assert len(started) == 1, "started again once, not at every start"
