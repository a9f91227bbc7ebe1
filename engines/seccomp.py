"""The agent sandbox's seccomp filter (SPEC §11, R-SB10), built with libseccomp (``pyseccomp``).

It allows everything but what an agent never needs and kernel exploits and sandbox escapes
reach for: new namespaces, mounts, tracing other processes, the kernel keyring, BPF, perf
events, userfaultfd, io_uring, kernel modules and kexec, rebooting, swap, accounting, handle
based opens, the kernel log, raw port I/O, quotas, and a few obsolete calls. The list follows
the default profiles of Docker and Flatpak. A denied call fails with EPERM; clone3 with ENOSYS,
because seccomp cannot read its flags: libc then falls back to clone, whose namespace flags
are filtered. bwrap loads the program just before it starts the sandbox's first command
(``prlimit``): its own set-up is done by then, and what ``setpriv`` needs to switch to the run's
uid (setresuid, setgroups, capset, prctl) stays allowed.

Non-native system call ABIs of the machine (i386 and x32 on x86_64, arm on aarch64) get the same
rules; any other ABI is killed (libseccomp's default for an architecture the filter lacks).
"""

from __future__ import annotations

import errno
import functools
import tempfile
from typing import Any

# CLONE_NEW* flags of clone(2) (os has them from Python 3.12 only). CLONE_NEWTIME shares its bit
# with clone's exit signal and is only valid for unshare and clone3, which are denied whole.
_CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_DENIED = (
    # namespaces and mounts
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    # other processes' memory and descriptors
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    # kernel attack surface no agent uses
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "modify_ldt",
    # the machine's administration (capabilities already stop most; this shuts the door twice)
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "open_by_handle_at",
    "syslog",
    "iopl",
    "ioperm",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    # obsolete
    "uselib",
    "ustat",
    "sysfs",
    "vm86",
    "vm86old",
)
# Terminal ioctls that push input into (or paste from) the controlling terminal (CVE-2017-5226,
# CVE-2023-28100); the engine runs in a session of its own, so this is defence in depth.
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
# personality(2) values Docker allows: PER_LINUX, PER_LINUX32, UNAME26 with either, and the
# query 0xffffffff. The kernel reads the argument as 32 bits.
_PERSONALITY_FLAGS_ALLOWED = 0x0008 | 0x20000
_PERSONALITY_QUERY = 0xFFFFFFFF
_LOW_32_BITS = 0xFFFFFFFF


class SeccompUnavailable(Exception):
    """libseccomp or its Python binding is missing, or refused to build the filter."""


@functools.cache
def program() -> bytes:
    """The filter as a BPF program, built once per process (it never changes)."""
    try:
        import pyseccomp  # its import fails when libseccomp itself is missing

        with tempfile.TemporaryFile() as sink:
            _build(pyseccomp).export_bpf(sink)
            sink.seek(0)
            return sink.read()
    except (ImportError, RuntimeError, OSError) as exc:
        raise SeccompUnavailable(f"the seccomp filter could not be built: {exc}") from exc


def _build(seccomp: Any) -> Any:
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    native = seccomp.system_arch()
    companions = {seccomp.Arch.X86_64: (seccomp.Arch.X86, seccomp.Arch.X32), seccomp.Arch.AARCH64: (seccomp.Arch.ARM,)}
    for arch in companions.get(native, ()):
        rules.add_arch(arch)
    deny = seccomp.ERRNO(errno.EPERM)
    for name in _DENIED:
        rules.add_rule(deny, name)
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    # s390 passes clone's flags second (CONFIG_CLONE_BACKWARDS2), every other architecture first.
    flags_arg = 1 if native in (seccomp.Arch.S390, seccomp.Arch.S390X) else 0
    for flag in _CLONE_NAMESPACE_FLAGS:
        rules.add_rule(deny, "clone", seccomp.Arg(flags_arg, seccomp.MASKED_EQ, flag, flag))
    for request in (_TIOCSTI, _TIOCLINUX):
        rules.add_rule(deny, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, _LOW_32_BITS, request))
    for mask, value in _personality_denials():
        rules.add_rule(deny, "personality", seccomp.Arg(0, seccomp.MASKED_EQ, mask, value))
    return rules


def _personality_denials() -> list[tuple[int, int]]:
    """(mask, value) pairs whose matches together are exactly the personalities not allowed.

    A rule compares an argument once, so "not one of these values" is spelt as a union: a
    forbidden bit set while the next forbidden bit (in a cycle over them) is clear matches every
    forbidden value except those with all forbidden bits set; those few are listed whole, but for
    the query.
    """
    forbidden = [1 << bit for bit in range(32) if not (1 << bit) & _PERSONALITY_FLAGS_ALLOWED]
    pairs = [(bit | after, bit) for bit, after in zip(forbidden, forbidden[1:] + forbidden[:1], strict=True)]
    all_forbidden = _LOW_32_BITS & ~_PERSONALITY_FLAGS_ALLOWED
    for allowed in (0, 0x0008, 0x20000, _PERSONALITY_FLAGS_ALLOWED):
        if all_forbidden | allowed != _PERSONALITY_QUERY:
            pairs.append((_LOW_32_BITS, all_forbidden | allowed))
    return pairs
