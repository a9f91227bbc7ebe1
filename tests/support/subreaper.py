"""`python -m tests.support.subreaper ARGV...`: run ARGV as a child subreaper's only child.

Whatever ARGV starts stays a descendant of this process, however it detaches (a new session, a
double fork): when a parent ends, its children move here instead of to init, and are reaped here.
So this process ends exactly when the last process of ARGV's tree has ended, with ARGV's exit
status; until then its descendants are that tree. ARGV leads a session of its own, as under a
service manager or a terminal's job control.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    leader = os.fork()
    if leader == 0:
        os.setsid()
        # As a terminal or a service manager starts it: a launcher in the background (make test
        # run with `&`) ignores SIGINT and SIGQUIT, and daphne would inherit that and ignore Ctrl-C.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        os.execvp(argv[0], argv)
    code = 1
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return code  # no child left, so no descendant either
        if pid == leader:
            code = os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
