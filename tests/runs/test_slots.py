"""Slots of resumable runs (R-LC7, R-LC8) with SKILLRUNNER_MAX_CONCURRENT_TURNS=1.

The task queue is held back (`manual_dispatch`): the test sees which turns the service offers and
runs them itself, a worker thread per turn. The sticky_process half is in test_sticky_claude.py.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.support.conversations import (
    AUTO_FRESH,
    ask,
    events_of,
    haiku_done,
    plan_done,
    reply,
    start,
    status_of,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def one_slot(settings, install_skill):
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    install_skill("trip-planner")
    install_skill("haiku-writer")


def _slots_held() -> int:
    from runs.models import Run

    return Run.objects.filter(holds_slot=True).count()


def _holds_slot(request_id: str) -> bool:
    from runs.models import Run

    return Run.objects.get(pk=request_id).holds_slot


def _calls_in(fake_codex, request_id: str) -> list[dict]:
    return [call for call in fake_codex.invocations() if request_id in call["cwd"]]


def test_resumable_waiting_user_releases_its_slot(api, fake_codex, manual_dispatch):
    """Seed scenario: resumable waiting_user 释放槽位 — the run that held the only slot gives it back
    when it starts waiting, and a queued run gets its chance while the first one waits."""
    fake_codex.script(ask(sleep=1.0))
    first = start(api)
    worker = manual_dispatch.run_in_thread(first, 1)
    wait_until(lambda: _calls_in(fake_codex, first), 10, "the first run's engine to start")
    assert status_of(api, first)["interactive_profile"] == "resumable"
    assert _holds_slot(first)

    fake_codex.script(haiku_done())  # what the second run's engine will answer
    second = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    assert (second, 1) not in manual_dispatch.enqueued  # no free slot: not even offered
    manual_dispatch.run_inline(second, 1)  # a stray delivery cannot start it either
    assert status_of(api, second)["status"] == "queued" and not _calls_in(fake_codex, second)

    worker.join(timeout=10)
    assert status_of(api, first)["status"] == "waiting_user"
    assert not _holds_slot(first) and _slots_held() == 0
    assert (second, 1) in manual_dispatch.enqueued  # offered as soon as the slot was released

    manual_dispatch.run_inline(second, 1)
    assert status_of(api, second)["status"] == "succeeded"
    assert status_of(api, first)["status"] == "waiting_user"  # it ran while the first one waited


def test_resumable_resume_reacquires_a_slot_before_running(api, fake_codex, manual_dispatch):
    """Seed scenario: resumable 恢复执行前重新申请槽位 — a reply queues the run; it becomes running only
    once it holds a slot again, so while another run holds the only slot it stays queued."""
    fake_codex.script(ask())
    waiting = start(api)
    manual_dispatch.run_inline(waiting, 1)
    assert status_of(api, waiting)["status"] == "waiting_user" and _slots_held() == 0

    fake_codex.script(haiku_done(sleep=1.0), plan_done())  # the busy run's turn; the resumed turn
    busy = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    worker = manual_dispatch.run_in_thread(busy, 1)
    wait_until(lambda: _calls_in(fake_codex, busy), 10, "the busy run's engine to start")
    assert _holds_slot(busy)

    response = reply(api, waiting, 1, "Kyoto")
    assert response.status_code == 200 and response.json()["status"] == "queued"
    assert (waiting, 2) not in manual_dispatch.enqueued
    manual_dispatch.run_inline(waiting, 2)  # even delivered, the turn cannot claim the busy slot
    status = status_of(api, waiting)
    assert status["status"] == "queued" and status["attempt_number"] == 2
    assert len(_calls_in(fake_codex, waiting)) == 1 and _slots_held() == 1

    worker.join(timeout=10)
    assert status_of(api, busy)["status"] == "succeeded"
    assert (waiting, 2) in manual_dispatch.enqueued
    assert status_of(api, waiting)["status"] == "queued"
    manual_dispatch.run_inline(waiting, 2)
    assert status_of(api, waiting)["status"] == "succeeded"
    assert len(_calls_in(fake_codex, waiting)) == 2

    # The resumed turn became running only after the busy run had released the slot.
    busy_done = [e for e in events_of(api, busy) if e["kind"] == "status" and e["payload"]["to"] == "succeeded"][0]
    resumed = [e for e in events_of(api, waiting) if e["kind"] == "status" and e["payload"]["to"] == "running"][-1]
    assert datetime.fromisoformat(resumed["ts"]) >= datetime.fromisoformat(busy_done["ts"])
    assert _slots_held() == 0
