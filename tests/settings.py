"""Settings for the test suite: the production settings, with a throwaway data dir and key."""

import atexit
import os
import shutil
import tempfile
import urllib.parse

if "SKILLRUNNER_DATA_DIR" not in os.environ:  # a service process a test starts is given its own
    os.environ["SKILLRUNNER_DATA_DIR"] = tempfile.mkdtemp(prefix="skillrunner-test-")
    atexit.register(shutil.rmtree, os.environ["SKILLRUNNER_DATA_DIR"], ignore_errors=True)
os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-never-used-in-production")
# Throttle counters live in the cache, which outlives a test and is keyed by user ids that tests
# reuse: ordinary tests must never trip them. Rate-limit tests set tight rates themselves.
os.environ.setdefault("SKILLRUNNER_RATE_RUN_CREATE", "100000/min")
os.environ.setdefault("SKILLRUNNER_RATE_REPLY", "100000/min")
# Under pytest-xdist each worker process (gw0, gw1, …) gets a Redis database of its own, so the
# channel groups and queues of one worker's tests (keyed by reused user and run ids) never reach
# another's; the service processes a test starts inherit it through REDIS_URL.
if os.environ.get("REDIS_URL") and os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    _redis = urllib.parse.urlsplit(os.environ["REDIS_URL"])
    _db = int(_redis.path.lstrip("/") or 0) + 1 + int(os.environ["PYTEST_XDIST_WORKER"][2:])
    os.environ["REDIS_URL"] = urllib.parse.urlunsplit(_redis._replace(path=f"/{_db}"))

from skillrunner.settings import *  # noqa: E402,F403
from skillrunner.settings import DATA_DIR, DATABASES, Q_CLUSTER  # noqa: E402

# A file database even for SQLite, so worker subprocesses in live tests see the same data.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-db.sqlite3")}
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_skillrunner_{os.getpid()}"}

# In-process tests run turns inline when they are enqueued; live tests run a real cluster.
Q_CLUSTER = {**Q_CLUSTER, "sync": os.environ.get("SKILLRUNNER_TEST_LIVE_WORKER") != "1"}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
