"""Shared fixtures: isolated data dirs, users with API tokens, installed skills, a scripted engine."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests.support import scheduling
from tests.support.clients import client_for
from tests.support.fake_codex import FakeCodex
from tests.support.outside_reads import OutsideReadGuard

# Fixtures more than one app's tests use, kept with the helpers they go with.
pytest_plugins = [
    "tests.support.interactive_runs",
    "tests.support.probing_codex",
    "tests.support.sandbox_probes",
    "tests.support.web_clients",
]

# The umask the suite started with, read before any test module ran (os.umask only reads by setting).
SUITE_UMASK = os.umask(0o022)
os.umask(SUITE_UMASK)


@pytest.fixture(autouse=True)
def suite_umask():
    """Each test starts with the suite's umask. Importing skillrunner.asgi, as the socket tests do
    (at collection, too), runs that entry point's start, which makes what the process creates
    private to the service user (umask 077, R-FS3); the tests after it write fake engines and
    skills that the sandbox's own uid must read."""
    os.umask(SUITE_UMASK)
    yield


REPO = Path(__file__).resolve().parent.parent
BUNDLED_SKILLS = REPO / "skills" / "bundled"
FAKE_CODEX = REPO / "tests" / "support" / "fake_codex.py"
# Packages in the upstream Skill Runner layout, written for these tests (R-SK1, R-OP6).
TEST_SKILLS = REPO / "tests" / "support" / "skills"

OUTSIDE_READS = OutsideReadGuard(REPO)
OUTSIDE_READS.install()

# One uv download cache for the whole session: every test has its own data dir (so its own
# dependency environments, R-SK7), but the package index is asked about a package only once.
os.environ.setdefault("UV_CACHE_DIR", os.path.join(tempfile.gettempdir(), "skillrunner-tests-uv-cache"))


# `--dist loadscope` as tests/support/scheduling.py refines it: tests sharing nothing with their
# module go on their own to whichever process is free.
def pytest_configure(config: pytest.Config) -> None:
    scheduling.prepare(config)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist sends the collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    scheduling.write_down(session)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    return scheduling.SpreadScheduling(config, log) if config.getvalue("dist") == "loadscope" else None


@pytest.fixture(scope="session", autouse=True)
def installation() -> None:
    """The explicit startup step `serve` and `worker` take too: importing settings creates nothing."""
    from processes.startup import prepare_installation

    prepare_installation()


@pytest.fixture(autouse=True)
def no_outside_reads():
    """R-OP6: a read outside the checkout fails the test that made it, even if the code that tried
    swallowed the error (per test, so it also fails a run spread over pytest-xdist's workers)."""
    before = len(OUTSIDE_READS.violations)
    yield
    made = OUTSIDE_READS.violations[before:]
    assert not made, "R-OP6: the test read outside the checkout: " + ", ".join(made)


def pytest_sessionfinish(session, exitstatus):
    """A read outside the checkout fails the run even if the code that tried swallowed the error."""
    if OUTSIDE_READS.violations:
        print("\nR-OP6: the tests read outside the checkout:\n  " + "\n  ".join(OUTSIDE_READS.violations))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def webhook_tasks_inline(monkeypatch):
    """The synchronous cluster of in-process tests runs a task inside async_task: a webhook or
    question email task makes its attempt there too (a live cluster hands it to a sender thread),
    and as no task ever waits in the queue, a due row may be offered again at once."""
    from django_q.conf import Conf

    if Conf.SYNC:
        from notifications import email, services, task_queue, tasks

        monkeypatch.setattr(tasks, "send_webhook", services.attempt_delivery)
        monkeypatch.setattr(tasks, "email_question", email.attempt_question_email)
        monkeypatch.setattr(task_queue, "REOFFER_AFTER_SECONDS", 0.0)


@pytest.fixture(autouse=True)
def isolated_data_dir(settings, tmp_path):
    """Every test gets its own data dir: runs, snapshots and engine homes never leak between tests."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


@pytest.fixture
def alice(db, django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-password-123")


@pytest.fixture
def bob(db, django_user_model):
    return django_user_model.objects.create_user("bob", password="bob-password-123")


@pytest.fixture
def admin_user(db, django_user_model):
    return django_user_model.objects.create_user("root", password="root-password-123", is_staff=True, is_superuser=True)


@pytest.fixture
def api(alice) -> APIClient:
    return client_for(alice)


@pytest.fixture
def bob_api(bob) -> APIClient:
    return client_for(bob)


@pytest.fixture
def staff_api(admin_user) -> APIClient:
    return client_for(admin_user)


@pytest.fixture
def install_skill(db):
    """Install a skill folder by name from the bundled skills or the test skills."""
    from skills.services import install_path

    def install(name: str, root: Path | None = None):
        for base in [root] if root else [BUNDLED_SKILLS, TEST_SKILLS]:
            if (base / name).is_dir():
                return install_path(base / name)
        raise FileNotFoundError(name)

    return install


@pytest.fixture
def configure_engine(settings):
    """`configure_engine(engine, binary=…, base_url=…, api_key=…, model=…)`: an operator's
    settings for one engine, for this test only (R-EN4, R-EN8)."""

    def configure(engine: str, **values: str) -> None:
        engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
        engines[engine].update(values)
        settings.SKILLRUNNER_ENGINES = engines

    return configure


@pytest.fixture
def real_engine(configure_engine, settings, model_server):
    """`real_engine(engine)` points the service's engine at the directory's scripted model server,
    as an operator would; no engine process outlives the test."""
    from tests.support.engine_env import SERVICE_MODELS, SERVICE_URL_PATHS, require_engine
    from tests.support.processes import kill_all, processes_in

    def configure(engine: str) -> None:
        configure_engine(
            engine,
            binary=str(require_engine(engine)),
            base_url=model_server.url + SERVICE_URL_PATHS.get(engine, ""),
            api_key="test-key-not-secret",
            model=SERVICE_MODELS[engine],
        )
        settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0

    yield configure
    runs = Path(settings.DATA_DIR) / "runs"
    if runs.is_dir():
        for run_dir in runs.iterdir():
            kill_all(processes_in(run_dir))


@pytest.fixture
def fake_codex(configure_engine, settings, tmp_path) -> FakeCodex:
    root = tmp_path / "fake-codex"
    root.mkdir()
    fake = FakeCodex(root, settings.DATA_DIR)
    configure_engine("codex", binary=str(fake.binary))
    return fake


class ManualDispatch:
    """Replaces the task queue: enqueued turns are recorded, and only run when a test says so."""

    def __init__(self) -> None:
        self.enqueued: list[tuple[str, int]] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, request_id, attempt_number: int) -> None:
        self.enqueued.append((str(request_id), attempt_number))

    def run_inline(self, request_id, attempt_number: int = 1) -> None:
        from worker.execution import run_claimed_turn

        run_claimed_turn(str(request_id), attempt_number)

    def run_in_thread(self, request_id, attempt_number: int = 1) -> threading.Thread:
        """The worker side in its own thread (own DB connection), as a django-q2 worker would."""
        from django.db import connection

        def target() -> None:
            try:
                self.run_inline(request_id, attempt_number)
            finally:
                connection.close()

        thread = threading.Thread(target=target, name=f"turn-{request_id}-{attempt_number}", daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread


@pytest.fixture
def manual_dispatch(monkeypatch):
    """Runs created through the API stay queued until the test runs their turn itself."""
    dispatch = ManualDispatch()
    monkeypatch.setattr("runs.task_queue.enqueue_turn", dispatch)
    yield dispatch
    for thread in dispatch.threads:
        thread.join(timeout=15)
    assert not any(t.is_alive() for t in dispatch.threads), "a turn thread outlived its test"
