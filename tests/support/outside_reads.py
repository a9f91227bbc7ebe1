"""R-OP6: the test suite reads nothing beside the checkout (no sibling folder, no sibling checkout).

An audit hook (PEP 578) sees every `open`, `os.listdir` and `os.scandir` of the test process.
A path below the checkout's parent directory but outside the checkout is refused on the spot
(the test that tried fails with OutsideReadError) and recorded, so the session fails too even
when the error was swallowed. Directories that merely happen to sit beside the checkout and that
every process uses (the temp dir, HOME, the Python installation) do not count.

Subprocesses (service processes, engine CLIs) are not watched; they run with the checkout as cwd.
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

WATCHED_EVENTS = {"open", "os.listdir", "os.scandir"}


class OutsideReadError(PermissionError):
    pass


class OutsideReadGuard:
    def __init__(self, checkout: Path) -> None:
        self.checkout = os.path.normpath(checkout)
        self.parent = os.path.dirname(self.checkout)
        common_dirs = [tempfile.gettempdir(), str(Path.home()), sys.prefix, sys.base_prefix]
        # A common directory that holds the checkout (say it lives under HOME) exempts nothing.
        self.exempt = [os.path.normpath(d) for d in common_dirs if not _is_within(self.checkout, d)]
        self.violations: list[str] = []
        self._unrecorded = 0

    def install(self) -> None:
        if self.parent != os.path.dirname(self.parent):  # a checkout at / has no "beside"
            sys.addaudithook(self._hook)

    def is_outside(self, path: str) -> bool:
        full = os.path.normpath(os.path.join(os.getcwd(), path))
        return (
            _is_within(full, self.parent)
            and not _is_within(full, self.checkout)
            and not any(_is_within(full, d) for d in self.exempt)
        )

    def _hook(self, event: str, args: tuple) -> None:
        if event not in WATCHED_EVENTS or not args:
            return
        path = args[0]
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if isinstance(path, str) and self.is_outside(path):
            if not self._unrecorded:
                self.violations.append(f"{event} {path}")
            raise OutsideReadError(f"R-OP6: the tests read {path!r}, outside the checkout {self.checkout}")

    @contextmanager
    def unrecorded(self):
        """For the guard's own test: still refused, but not failing the session."""
        self._unrecorded += 1
        try:
            yield
        finally:
            self._unrecorded -= 1


def _is_within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
