"""skillrunner.forking: start-up work in a child that ends with it."""

import os
import sys

import pytest
from django.core.management.base import CommandError

from skillrunner.forking import run_in_child


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
