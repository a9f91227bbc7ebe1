"""Fixtures for interactive runs: the trip-planner and haiku-writer skills, the real Claude Code
(sticky_process) against the scripted model server, and runs whose creating POST runs in a
background thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.clients import client_for
from tests.support.conversations import interactive_job, kill_all, processes_in, wait_until
from tests.support.engine_env import engine_binary
from tests.support.scripted_model_server import ScriptedModelServer


@pytest.fixture
def trip(install_skill):
    install_skill("trip-planner")


@pytest.fixture
def haiku(install_skill):
    install_skill("haiku-writer")


# --- the real Claude Code: the sticky_process profile ---------------------------------------------


@pytest.fixture
def model_server():
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def claude(settings, model_server, configure_engine):
    """Points the service's claude engine at the scripted model server, as an operator would."""
    binary = engine_binary("claude")
    if not binary.exists():
        pytest.fail(f"claude CLI not installed at {binary}; run `make engines`", pytrace=False)
    configure_engine("claude", binary=str(binary), base_url=model_server.url, api_key="test-key-not-secret", model="")
    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0
    yield model_server
    runs = Path(settings.DATA_DIR) / "runs"
    if runs.is_dir():  # whatever a test asserted, no engine process outlives it
        for run_dir in runs.iterdir():
            kill_all(processes_in(run_dir))


class BackgroundRun:
    """A run whose creating POST executes in a thread: a sticky engine keeps its turn task (and so,
    with inline django-q2, that POST) alive until the run ends."""

    def __init__(self, user, body: dict) -> None:
        self.client = client_for(user)
        self.responses: list = []
        self.request_id: str | None = None
        before = set(self._ids())
        self.thread = threading.Thread(target=self._post, args=(body,), daemon=True)
        self.thread.start()
        self.request_id = wait_until(lambda: next(iter(set(self._ids()) - before), None), 60, "the run to be created")

    def _ids(self) -> list[str]:
        from runs.models import Run

        return [str(pk) for pk in Run.objects.values_list("pk", flat=True)]

    def _post(self, body: dict) -> None:
        from django.db import connection

        try:
            self.responses.append(self.client.post("/v1/jobs", body, format="json"))
        finally:
            connection.close()

    def wait_for(self, api, statuses: set[str], timeout: float = 60) -> dict:
        def current():
            body = api.get(f"/v1/jobs/{self.request_id}").json()
            return body if body["status"] in statuses else None

        return wait_until(current, timeout, f"run {self.request_id} to become one of {sorted(statuses)}")

    def join(self, timeout: float = 30) -> None:
        self.thread.join(timeout=timeout)
        assert not self.thread.is_alive(), "the turn task of the sticky run never returned"


@pytest.fixture
def background_runs(alice):
    """Start runs in the background; at teardown every one is ended and its thread joined."""
    started: list[BackgroundRun] = []

    def start(skill_id: str = "trip-planner", **kwargs) -> BackgroundRun:
        run = BackgroundRun(alice, interactive_job(skill_id, **kwargs))
        started.append(run)
        return run

    yield start
    from runs import services
    from runs.models import Run

    for run in started:
        if run.thread.is_alive():
            record = Run.objects.filter(pk=run.request_id).first()
            if record is not None and not record.is_terminal:
                services.cancel_run(record)
            run.thread.join(timeout=30)
    assert not any(run.thread.is_alive() for run in started), "a sticky run's task outlived its test"
