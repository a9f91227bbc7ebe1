"""R-SB6: the service never runs an agent unconfined by accident, and says so when it does."""

from __future__ import annotations

import contextlib
import ctypes.util
import logging
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from django.apps import apps
from django.test import Client

from engines import sandbox
from engines.provider_api import OPENAI_RESPONSES
from engines.types import SandboxSettings
from tests.support.jobs import create_job, haiku_step, write_executable

UNUSED_PROVIDER = "http://127.0.0.1:9"  # the relay starts; nothing here calls it

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broken_bwrap(monkeypatch, tmp_path):
    """Point the sandbox at a bwrap that fails the way one without user namespaces does."""

    def use(binary: str) -> None:
        monkeypatch.setattr(sandbox, "BWRAP", binary)
        sandbox.forget_checks()

    yield use
    sandbox.forget_checks()


@pytest.mark.parametrize("kind", ["missing", "broken"])
def test_unusable_bwrap_fails_turns_and_is_reported(kind, api, install_skill, fake_codex, broken_bwrap, tmp_path):
    if kind == "missing":
        broken_bwrap(str(tmp_path / "no-such-bwrap"))
    else:
        fake = write_executable(
            tmp_path / "bwrap", "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
        )
        broken_bwrap(str(fake))
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())

    status = api.get(f"/v1/jobs/{create_job(api)['request_id']}").json()
    assert status["status"] == "failed"
    assert status["error"]["code"] == "SANDBOX_UNAVAILABLE"
    assert "SKILLRUNNER_SANDBOX=off" in status["error"]["message"] and "bubblewrap" in status["error"]["message"]
    assert fake_codex.invocations() == [], "the engine must never start unconfined"

    engines = api.get("/v1/engines").json()
    assert engines["sandbox"]["available"] is False and "bubblewrap" in engines["sandbox"]["detail"]
    assert not any(entry["available"] for entry in engines["engines"])
    ready = Client().get("/v1/system/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["sandbox"].startswith("error: ")


def test_a_missing_libseccomp_makes_the_sandbox_unavailable(monkeypatch, fresh_seccomp_program):
    """R-SB6, R-SB10: no seccomp filter, no sandboxed turn, and the check says what to install."""
    find_library = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None if name == "seccomp" else find_library(name))
    monkeypatch.delitem(sys.modules, "pyseccomp", raising=False)  # imported afresh, it looks for the library

    problem = sandbox.sandbox_problem(SandboxSettings())

    assert problem is not None and "Unable to find libseccomp" in problem, problem
    assert "apt-get install libseccomp2" in problem and "SKILLRUNNER_SANDBOX=off" in problem


def test_working_sandbox_is_reported_ready(api, fake_codex):
    sandbox.forget_checks()
    engines = api.get("/v1/engines").json()
    assert engines["sandbox"] == {"mode": "bwrap", "network": "open", "available": True, "detail": None}
    assert Client().get("/v1/system/readyz").json()["checks"]["sandbox"] == "ok"


def test_off_warns_at_start_and_shows_a_banner(settings, alice, admin_user, caplog):
    settings.SKILLRUNNER_SANDBOX = "off"
    with caplog.at_level(logging.WARNING):
        apps.get_app_config("runs").ready()
    assert any("UNCONFINED" in record.getMessage() for record in caplog.records)

    client = Client()
    client.force_login(admin_user)
    for url in ("/", "/admin/"):
        page = client.get(url, follow=True)
        assert page.status_code == 200, url
        assert "agent sandbox is switched off" in page.content.decode(), url
    assert Client().get("/v1/system/readyz").json()["checks"]["sandbox"].startswith("off")

    settings.SKILLRUNNER_SANDBOX = "bwrap"
    page = client.get("/", follow=True)
    assert "agent sandbox is switched off" not in page.content.decode()


def test_run_directory_inside_a_readonly_path_is_refused(tmp_path):
    """A CLI installed above the data directory would show the agent every run: refused."""
    from engines.types import EngineConfig, SkillMaterial, TurnRequest

    request = TurnRequest(
        run_dir=tmp_path / "data" / "runs" / "r",
        prompt="",
        mode="auto",
        skill=SkillMaterial("s", tmp_path),
        hard_timeout_seconds=1,
    )
    config = EngineConfig(binary=str(tmp_path / "codex"), home=tmp_path / "data" / "engine-homes" / "codex" / "r")
    box = sandbox.Sandbox.open(request, config, UNUSED_PROVIDER, OPENAI_RESPONSES)
    assert box is not None
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="data directory"):
            box.command(str(tmp_path / "codex"), [], {"PATH": "/usr/bin"})
    finally:
        box.close()
    assert Path(request.run_dir).exists() is False


@contextlib.contextmanager
def private_umask():
    """The service's own umask (manage.py, asgi.py): every folder it creates is 0700."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def test_sandboxed_turn_starts_in_a_private_run_folder(api, install_skill, fake_codex):
    """R-SB2, R-FS3: bwrap enters the run folder before it drops to the run's uid, as a root
    that has no CAP_DAC_OVERRIDE; a 0700 folder must not stop it."""
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())  # the fake's own script stays readable to the agent
    with private_umask():
        request_id = create_job(api)["request_id"]
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert status["status"] == "succeeded", status["error"]
    assert len(fake_codex.invocations()) == 1


class Checks:
    """Stands in for the real check: records where each one ran and holds it until released."""

    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.threads: list[str] = []
        self.release = threading.Event()

    def __call__(self, settings) -> str | None:
        self.threads.append(threading.current_thread().name)
        assert self.release.wait(10), "the test never released the check"
        return self.answer


@pytest.fixture
def due_again(monkeypatch):
    """`due_again(last_answer, next_answer)`: the last check's answer is due again; the next check
    answers `next_answer` once released."""

    def make(last: str | None, following: str | None) -> Checks:
        sandbox.forget_checks()  # a check an earlier test started aside must not answer into this one
        checks = Checks(following)
        monkeypatch.setattr(sandbox, "_probe_tools", checks)
        key = (SandboxSettings().network, os.geteuid() == 0)
        stale = time.monotonic() - sandbox._CHECK_TTL_SECONDS - 1
        monkeypatch.setitem(sandbox._check_cache, key, (stale, last))
        return checks

    yield make
    sandbox.forget_checks()


def _wait_for_rechecks() -> None:
    for thread in threading.enumerate():
        if thread.name == "sandbox-check":
            thread.join(10)
            assert not thread.is_alive()


def test_a_passed_check_due_again_is_made_aside_while_turns_go_on(due_again):
    """A turn never waits for the check (a bwrap start) once one has passed (#16)."""
    checks = due_again(None, "bwrap broke meanwhile")
    assert sandbox.sandbox_problem(SandboxSettings()) is None  # answered while the check is held
    assert sandbox.sandbox_problem(SandboxSettings()) is None  # …once more, starting no second check
    assert checks.threads == ["sandbox-check"]
    checks.release.set()
    _wait_for_rechecks()
    assert sandbox.sandbox_problem(SandboxSettings()) == "bwrap broke meanwhile"


def test_a_failed_check_due_again_is_made_before_it_is_answered(due_again):
    """A host fixed meanwhile is seen by the next turn, not one after it."""
    checks = due_again("bwrap is not installed", None)
    checks.release.set()
    assert sandbox.sandbox_problem(SandboxSettings()) is None
    assert checks.threads == [threading.current_thread().name]


def test_a_check_running_when_the_checks_are_forgotten_is_not_recorded(due_again, monkeypatch):
    """forget_checks means the host changed: a check that probed it before must not answer after."""
    before = due_again(None, "probed before the host changed")
    assert sandbox.sandbox_problem(SandboxSettings()) is None  # the check now runs aside, held
    sandbox.forget_checks()
    before.release.set()
    _wait_for_rechecks()
    after = Checks(None)
    after.release.set()
    monkeypatch.setattr(sandbox, "_probe_tools", after)
    assert sandbox.sandbox_problem(SandboxSettings()) is None
    assert after.threads == [threading.current_thread().name], "the check made before was answered instead"


def test_a_process_forked_while_a_check_runs_aside_checks_again_itself(due_again):
    """The worker's cluster processes are forked: one must not wait forever for its parent's thread."""
    checks = due_again(None, None)
    sandbox.sandbox_problem(SandboxSettings())  # a check thread now runs in this process
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own check must start, aside again
        try:
            sandbox.sandbox_problem(SandboxSettings())
            os.write(write_end, ",".join(t.name for t in threading.enumerate()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        child_threads = reader.read().decode().split(",")
    os.waitpid(pid, 0)
    checks.release.set()
    _wait_for_rechecks()
    assert "sandbox-check" in child_threads
