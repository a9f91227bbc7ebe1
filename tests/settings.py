"""Settings for the test suite: the production settings, with a throwaway data dir and key."""

import os
import tempfile

os.environ.setdefault("SKILLRUNNER_DATA_DIR", tempfile.mkdtemp(prefix="skillrunner-test-"))
os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-never-used-in-production")
# Throttle counters live in the cache, which outlives a test and is keyed by user ids that tests
# reuse: ordinary tests must never trip them. Rate-limit tests set tight rates themselves.
os.environ.setdefault("SKILLRUNNER_RATE_RUN_CREATE", "100000/min")
os.environ.setdefault("SKILLRUNNER_RATE_REPLY", "100000/min")

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
