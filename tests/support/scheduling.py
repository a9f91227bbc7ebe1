"""How the suite is spread over pytest-xdist's processes under `--dist loadscope` (`make test`).

loadscope sends each module whole to one process, so that tests sharing something there run in
order on it. Most do share something: a module's service processes or browser (a fixture of ours wider
than a test), or the test database in this process, whose connections carry state from one test
to the next (test_status_fast_path reads the prepared statements of its pooled PostgreSQL
connection, and counts those an earlier test left). A test sharing neither (one starting its own
services, a real CLI on its own, plain code) goes on its own to whichever process is free: a
module of such slow tests, the shutdown matrix, is shared out instead of keeping one process busy
while the other idles.

Only the workers know which tests those are (by their fixtures); the controller, which schedules
by node id, reads the list the workers write down after collecting (both collect the same tests).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

LIST_DIR = "SKILLRUNNER_TEST_SPREAD_DIR"  # set by the controller, inherited by its workers
LIST_NAME = "on-their-own.json"
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


def prepare(config: pytest.Config) -> None:
    """On the controller of a loadscope run, before the workers start: where they write the list."""
    if getattr(config.option, "dist", "no") == "loadscope" and not hasattr(config, "workerinput"):
        folder = tempfile.mkdtemp(prefix="skillrunner-test-spread-")
        os.environ[LIST_DIR] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def write_down(session: pytest.Session) -> None:
    """On a worker, once it has collected: the tests that may run apart from their module."""
    folder = os.environ.get(LIST_DIR)
    if folder and hasattr(session.config, "workerinput"):
        alone = [item.nodeid for item in session.items if shares_nothing(item)]
        staging = Path(folder) / f".{session.config.workerinput['workerid']}.json"
        staging.write_text(json.dumps(alone))
        staging.replace(Path(folder) / LIST_NAME)


def shares_nothing(item: pytest.Item) -> bool:
    """No test database in this process, and no fixture of ours shared beyond the test (the
    session's are each process's own anyway)."""
    if item.get_closest_marker("django_db") or DATABASE_FIXTURES & set(item.fixturenames):
        return False
    fixtures = getattr(item, "_fixtureinfo", None)
    definitions = [d for defs in fixtures.name2fixturedefs.values() for d in defs] if fixtures else []
    return not any(
        d.scope not in ("function", "session") and d.func.__module__.split(".")[0] == "tests" for d in definitions
    )


class SpreadScheduling(LoadScopeScheduling):
    """loadscope, except that a test sharing nothing with its module is a unit of its own."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self._alone: set[str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._alone is None:  # first asked once every worker has collected (and written it down)
            written = Path(os.environ.get(LIST_DIR, "")) / LIST_NAME
            self._alone = set(json.loads(written.read_text())) if written.is_file() else set()
        return nodeid if nodeid in self._alone else super()._split_scope(nodeid)
