"""A sticky run's wait (R-LC7) reads the run when a change to it wakes the worker, and at each
heartbeat; not on a timer in between (processes.wakeups)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest

from tests.support.service_processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "host:1:sticky"


class ResidentProcess:
    """Stands in for the resident engine process the worker holds: it stays alive."""

    def is_alive(self) -> bool:
        return True


@pytest.fixture
def waiting_run(install_skill, alice):
    from runs.models import Interaction, InteractiveProfile, Run, RunStatus

    version = install_skill("trip-planner")
    run = Run.objects.create(
        request_id=uuid.uuid4(),
        owner=alice,
        skill=version.skill,
        skill_version=version,
        engine="claude",
        execution_mode="interactive",
        interactive_profile=InteractiveProfile.STICKY_PROCESS,
        status=RunStatus.WAITING_USER,
        attempt_number=1,
        holds_slot=True,
        claimed_by=WORKER,
        pending_interaction_id=1,
        interaction_count=1,
    )
    question = {"interaction_id": 1, "kind": "open_text", "prompt": "Which city?"}
    Interaction.objects.create(run=run, interaction_id=1, attempt_number=1, prompt="Which city?", payload=question)
    return run


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Each read of the waiting run's state, by the wait."""
    from runs import services

    seen: list[str] = []
    read = services.sticky_wait_state

    def counted(*args, **kwargs):
        state = read(*args, **kwargs)
        seen.append(state.value)
        return state

    monkeypatch.setattr(services, "sticky_wait_state", counted)
    return seen


def _wait_in_background(run) -> tuple[threading.Thread, Callable[[], object]]:
    from django.db import connection

    from worker.execution import _await_sticky_reply

    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(_await_sticky_reply(run, WORKER, ResidentProcess()))  # type: ignore[arg-type]
        finally:
            connection.close()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, lambda: outcome[0]


def test_a_reply_wakes_the_wait_which_reads_nothing_meanwhile(settings, waiting_run, reads, alice):
    from runs import services

    settings.SKILLRUNNER_HEARTBEAT_SECONDS = 600
    thread, outcome = _wait_in_background(waiting_run)
    wait_until(lambda: reads == ["waiting"], 10, "the wait to read the run once it listens")
    thread.join(timeout=2.5)  # two looks at the process, and no read of the run
    assert thread.is_alive() and reads == ["waiting"]

    services.submit_reply(waiting_run, user=alice, interaction_id=1, response="Kyoto")
    thread.join(timeout=10)
    assert not thread.is_alive(), "the reply did not wake the wait"
    assert reads == ["waiting", "resumed"]
    resumed = outcome()
    assert resumed.status == "running" and resumed.attempt_number == 2


def test_a_cancel_wakes_the_wait_which_lets_the_process_go(settings, waiting_run, reads):
    from runs import services

    settings.SKILLRUNNER_HEARTBEAT_SECONDS = 600
    thread, outcome = _wait_in_background(waiting_run)

    wait_until(lambda: reads == ["waiting"], 10, "the wait to read the run once it listens")
    services.cancel_run(waiting_run)
    thread.join(timeout=10)
    assert not thread.is_alive() and reads == ["waiting", "lost"] and outcome() is None


def test_without_a_change_the_wait_reads_at_each_heartbeat(settings, waiting_run, reads):
    """The heartbeat renews the claim, so the resident process is not reaped as orphaned."""
    from runs import services
    from runs.models import Run

    settings.SKILLRUNNER_HEARTBEAT_SECONDS = 0.5
    Run.objects.filter(pk=waiting_run.pk).update(heartbeat_at=None)
    thread, _ = _wait_in_background(waiting_run)
    wait_until(lambda: len(reads) >= 3, 10, "two heartbeats")
    assert Run.objects.get(pk=waiting_run.pk).heartbeat_at is not None
    services.cancel_run(waiting_run)
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_database_error_while_waiting_is_retried_not_fatal(settings, waiting_run, monkeypatch, alice):
    """The worker's one retry policy (supervision.retry_while_database_away) covers the wait: a
    moment without the database neither fails the run nor lets its process go."""
    from django.db import OperationalError

    from runs import services

    read = services.sticky_wait_state
    failures = iter([OperationalError("the database is away")])

    def flaky(*args, **kwargs):
        if (failure := next(failures, None)) is not None:
            raise failure
        return read(*args, **kwargs)

    monkeypatch.setattr(services, "sticky_wait_state", flaky)
    settings.SKILLRUNNER_HEARTBEAT_SECONDS = 600
    thread, outcome = _wait_in_background(waiting_run)
    services.submit_reply(waiting_run, user=alice, interaction_id=1, response="Kyoto")
    thread.join(timeout=10)
    assert not thread.is_alive()
    resumed = outcome()
    assert resumed is not None and resumed.status == "running"
