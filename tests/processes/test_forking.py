"""processes.forking: start-up work in a child that ends with it."""

import multiprocessing
import os
import signal
import subprocess
import sys
import threading

import pytest
from django.core.management.base import CommandError

from processes.forking import Flag, run_in_child
from tests.support.processes import kill_all, process_alive
from tests.support.service_processes import wait_until


def _write_pid(path):
    path.write_text(str(os.getpid()))


def test_the_work_runs_in_another_process_and_is_waited_for(tmp_path):
    marker = tmp_path / "pid"
    run_in_child("writing the pid", _write_pid, marker)
    child = int(marker.read_text())  # written before run_in_child returned
    assert child != os.getpid()
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)  # already reaped: no zombie is left behind


@pytest.mark.parametrize(
    ("main", "status", "printed"),
    [
        (lambda: sys.exit(3), 3, None),
        (lambda: 1 / 0, 1, "ZeroDivisionError"),
        (lambda: sys.exit("no way"), 1, "no way"),
    ],
    ids=["exit status", "exception", "exit message"],
)
def test_a_failure_in_the_child_is_an_error_of_the_caller(main, status, printed, capfd):
    with pytest.raises(CommandError, match=rf"^the work failed \(exit status {status}\)$"):
        run_in_child("the work", main)
    err = capfd.readouterr().err
    if printed is None:  # a plain exit status is not an error report
        assert "Traceback" not in err
    else:
        assert printed in err  # the child's traceback or message reached stderr


def test_a_child_that_exits_without_a_status_succeeded():
    run_in_child("exiting", sys.exit)


# Each pid and its newline in one write: parent and child share the pipe, and with
# PYTHONUNBUFFERED=1 print() writes the number and the newline in two, which can interleave.
FORKS_THEN_WAITS = """
import os, time
from processes.forking import forks_end_with_their_parent
forks_end_with_their_parent()
child = os.fork()
if child == 0:
    grandchild = os.fork()  # the child's own forks end with it in turn
    if grandchild == 0:
        time.sleep(60)
        os._exit(0)
    os.write(1, b"%d\\n" % grandchild)
    time.sleep(60)
    os._exit(0)
os.write(1, b"%d\\n" % child)
time.sleep(60)
"""


def test_forks_end_with_their_parent_however_it_ends():
    """A parent killed outright (SIGKILL: nothing of its own runs) still takes its forks with it."""
    parent = subprocess.Popen([sys.executable, "-c", FORKS_THEN_WAITS], stdout=subprocess.PIPE, text=True)
    forks: list[int] = []
    try:
        assert parent.stdout is not None
        forks += [int(parent.stdout.readline()) for _ in range(2)]
        assert all(process_alive(pid) for pid in forks)
        parent.kill()
        parent.wait(timeout=5)
        wait_until(lambda: not any(process_alive(pid) for pid in forks), 5, "the forks to end with their parent")
    finally:
        parent.kill()
        parent.wait(timeout=5)
        kill_all(forks)


def test_a_flag_is_seen_by_forked_processes_and_set_whatever_became_of_them():
    """Set in one process, seen in another forked before; setting it never waits, not even for a
    process killed while it waited (multiprocessing.Event.set would wait for that one forever)."""
    flag = Flag()
    context = multiprocessing.get_context("fork")
    killed = context.Process(target=flag.wait, args=(60,))
    waiting = context.Process(target=lambda: sys.exit(0 if flag.wait(60) else 1))
    killed.start()
    waiting.start()
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(timeout=5)
    setter = threading.Thread(target=flag.set, daemon=True)
    setter.start()
    setter.join(timeout=5)
    assert not setter.is_alive(), "set() waited"
    waiting.join(timeout=5)
    assert waiting.exitcode == 0
    assert flag.is_set() and flag.wait(0)
