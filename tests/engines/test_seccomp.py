"""The seccomp filter's program (R-SB10); what it denies inside the sandbox is tested in the
red-team modules."""

from __future__ import annotations

import os
import random

from engines import sandbox, seccomp
from engines.types import SandboxSettings


def test_the_seccomp_program_is_built_once_per_process(monkeypatch, fresh_seccomp_program):
    """Every turn's bwrap gets the same program, each from a file of its own read from the start."""
    import pyseccomp

    built = []
    real_filter = pyseccomp.SyscallFilter

    def counted_filter(default_action: int):
        built.append(default_action)
        return real_filter(default_action)

    monkeypatch.setattr(pyseccomp, "SyscallFilter", counted_filter)

    program = seccomp.program()
    fds = [sandbox.memory_file("seccomp", program) for _ in range(2)]
    try:
        assert [os.read(fd, len(program) + 1) for fd in fds] == [program, program]
    finally:
        for fd in fds:
            os.close(fd)
    assert seccomp.program() is program and len(built) == 1
    assert sandbox.sandbox_problem(SandboxSettings()) is None and len(built) == 1  # the check uses it too


def test_personality_is_denied_for_every_value_docker_does_not_allow():
    """Docker's list, as the filter's union of masked comparisons: checked on the values next to
    the allowed ones (one bit more or less) and on random ones."""
    allowed = {0, 0x0008, 0x20000, 0x20008, 0xFFFFFFFF}
    near = {value ^ (1 << bit) for value in allowed for bit in range(32)}
    samples = allowed | near | {random.getrandbits(32) for _ in range(20_000)}
    rules = seccomp._personality_denials()

    denied = {value for value in samples if any(value & mask == match for mask, match in rules)}

    assert denied == samples - allowed
