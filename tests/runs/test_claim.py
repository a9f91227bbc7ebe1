"""Turn claiming (R-LC14, R-LC8): whatever the task queue redelivers, an attempt's engine turn runs
once; a task for a stale attempt does nothing; the global slot cap holds runs back in `queued`."""

from __future__ import annotations

import threading

import pytest

from tests.support.jobs import create_job, haiku_step, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


def _status(rid: str) -> str:
    from runs.models import Run

    return Run.objects.get(pk=rid).status


def test_redelivered_task_runs_the_engine_once(api, fake_codex, manual_dispatch):
    from worker.execution import run_claimed_turn

    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    assert manual_dispatch.enqueued == [(rid, 1)]
    run_claimed_turn(rid, 1)
    run_claimed_turn(rid, 1)
    assert len(fake_codex.invocations()) == 1
    assert _status(rid) == "succeeded"
    events = api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["events"]
    assert [e["payload"]["to"] for e in events if e["kind"] == "status"] == ["queued", "running", "succeeded"]


def test_a_claim_committed_while_its_answer_was_lost_runs_its_turn(api, fake_codex, manual_dispatch, monkeypatch):
    """The connection dropped at COMMIT (a database outage, a proxy cut): the claim was written, but
    the worker saw an error and claimed again. That retry knows its own claim and runs the turn;
    it used to find the run running, return, and leave it so with its slot held until the reaper."""
    from django.db import OperationalError

    from runs import services

    claim_turn, claims = services.claim_turn, []

    def answer_lost_once(*args):
        claims.append(args)
        run = claim_turn(*args)
        if len(claims) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return run

    monkeypatch.setattr(services, "claim_turn", answer_lost_once)
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    manual_dispatch.run_inline(rid)
    assert len(claims) == 2 and claims[0] == claims[1]
    assert (_status(rid), len(fake_codex.invocations())) == ("succeeded", 1)
    events = api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["events"]
    assert [e["payload"]["to"] for e in events if e["kind"] == "status"] == ["queued", "running", "succeeded"]


def test_concurrent_deliveries_run_the_engine_once(api, fake_codex, manual_dispatch):
    """Two workers get the same task at the same moment: exactly one claims it."""
    fake_codex.script(haiku_step(sleep=0.5))
    rid = create_job(api)["request_id"]
    barrier = threading.Barrier(3)
    original = manual_dispatch.run_inline

    def delayed(request_id, attempt_number=1):
        barrier.wait(timeout=5)
        original(request_id, attempt_number)

    manual_dispatch.run_inline = delayed
    threads = [manual_dispatch.run_in_thread(rid) for _ in range(3)]
    for thread in threads:
        thread.join(timeout=15)
    assert not any(t.is_alive() for t in threads)
    assert len(fake_codex.invocations()) == 1
    assert _status(rid) == "succeeded"


def test_task_for_a_stale_attempt_is_a_no_op(api, fake_codex, manual_dispatch):
    from runs.models import Run
    from worker.execution import run_claimed_turn

    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    before = Run.objects.get(pk=rid)
    for attempt in (0, 2, 7):
        run_claimed_turn(rid, attempt)
    assert fake_codex.invocations() == []
    after = Run.objects.get(pk=rid)
    assert (after.status, after.attempt_number, after.last_event_seq, after.holds_slot) == (
        "queued",
        1,
        before.last_event_seq,
        False,
    )
    run_claimed_turn(rid, 1)  # the current attempt still runs normally
    assert len(fake_codex.invocations()) == 1
    assert _status(rid) == "succeeded"


def test_task_for_a_finished_run_is_a_no_op(api, fake_codex):
    from runs.models import Run
    from worker.execution import run_claimed_turn

    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    assert _status(rid) == "succeeded"
    seq = Run.objects.get(pk=rid).last_event_seq
    run_claimed_turn(rid, 1)
    assert len(fake_codex.invocations()) == 1
    assert Run.objects.get(pk=rid).last_event_seq == seq


def test_task_for_an_unknown_run_is_a_no_op(db, fake_codex):
    import uuid

    from worker.execution import run_claimed_turn

    run_claimed_turn(str(uuid.uuid4()), 1)
    assert fake_codex.invocations() == []


def test_task_for_a_run_still_waiting_for_its_upload_is_a_no_op(api, install_skill, fake_codex, manual_dispatch):
    from worker.execution import run_claimed_turn

    install_skill("word-count")
    rid = api.post("/v1/jobs", {"skill_id": "word-count", "engine": "codex", "input": {}}, format="json").json()[
        "request_id"
    ]
    run_claimed_turn(rid, 1)
    assert fake_codex.invocations() == []
    assert _status(rid) == "queued"


def test_slot_cap_keeps_a_second_run_queued(api, fake_codex, manual_dispatch, settings):
    """R-LC8: with one slot, a second run stays queued while the first holds it, even if a task
    for it is delivered; it starts once the first ends."""
    from runs.models import Run
    from runs.services import dispatch_queued_runs
    from worker.execution import run_claimed_turn

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    fake_codex.script(haiku_step(sleep=1.5))
    first = create_job(api)["request_id"]
    thread = manual_dispatch.run_in_thread(first)
    assert wait_until(lambda: _status(first) == "running" and fake_codex.invocations(), timeout=10)
    assert Run.objects.get(pk=first).holds_slot

    second = create_job(api)["request_id"]
    assert (second, 1) not in manual_dispatch.enqueued
    assert dispatch_queued_runs() == 0
    run_claimed_turn(second, 1)  # delivered anyway (e.g. by a stale dispatch): no slot, no turn
    assert _status(second) == "queued"
    assert len(fake_codex.invocations()) == 1
    assert Run.objects.filter(holds_slot=True).count() == 1

    thread.join(timeout=10)
    assert _status(first) == "succeeded"
    assert Run.objects.filter(holds_slot=True).count() == 0
    assert (second, 1) in manual_dispatch.enqueued  # the freed slot dispatched it
    fake_codex.script(haiku_step())
    run_claimed_turn(second, 1)
    assert _status(second) == "succeeded"
    assert len(fake_codex.invocations()) == 2


def test_slots_allow_parallel_turns_up_to_the_cap(api, fake_codex, manual_dispatch, settings):
    from runs.models import Run
    from worker.execution import run_claimed_turn

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 2
    fake_codex.script(haiku_step(sleep=1.0))
    runs = [create_job(api)["request_id"] for _ in range(3)]
    # Dispatch may repeat itself (claims make that harmless) but never goes past the free slots.
    assert set(manual_dispatch.enqueued) == {(runs[0], 1), (runs[1], 1)}
    threads = [manual_dispatch.run_in_thread(rid) for rid in runs[:2]]
    assert wait_until(lambda: Run.objects.filter(status="running").count() == 2, timeout=10)
    run_claimed_turn(runs[2], 1)
    assert _status(runs[2]) == "queued"
    for thread in threads:
        thread.join(timeout=10)
    assert [_status(r) for r in runs[:2]] == ["succeeded", "succeeded"]
    assert (runs[2], 1) in manual_dispatch.enqueued


def test_failed_turn_releases_its_slot(api, fake_codex, settings):
    from runs.models import Run

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    fake_codex.script({"fail": "boom"})
    first = create_job(api)["request_id"]
    assert _status(first) == "failed"
    assert not Run.objects.get(pk=first).holds_slot
    fake_codex.script(haiku_step())
    second = create_job(api)["request_id"]
    assert _status(second) == "succeeded"


def test_a_status_change_saves_its_events_with_the_run(api, fake_codex, manual_dispatch):
    """The events of a status change (the turn's message, the result, the status) are numbered
    before the run is saved, so the run's UPDATE carries their sequence and one INSERT saves them:
    no update of the sequence of its own (#16). A run's events stay numbered 1..n with no gap."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.models import DispatchLock, Run
    from worker.execution import run_claimed_turn

    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    DispatchLock.objects.get_or_create(pk=1)  # migrated, but a transactional test before may have flushed it
    with CaptureQueriesContext(connection) as statements:
        run_claimed_turn(rid, 1)
    writes = [q["sql"].split('"')[1] for q in statements if q["sql"].startswith(("INSERT", "UPDATE"))]
    events = api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["events"]
    kinds = [e["kind"] for e in events]
    # the activity comes from its own thread (its own connection): not among the statements below
    assert kinds == ["status", "status", "activity", "assistant_message", "result", "status"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert Run.objects.get(pk=rid).last_event_seq == 6
    # claim: the run, its owner's place in the dispatch order, its status event; the engine's pid;
    # completion: usage, its duration counted for the metrics (one statement that makes its bucket's
    # row, as here, or adds to it), the run, three events, its end counted for the metrics (the same)
    assert writes == [
        "runs_run",
        "runs_ownerqueue",
        "runs_runevent",
        "runs_run",
        "runs_turnusage",
        "metrics_turndurations",
        "runs_run",
        "runs_runevent",
        "metrics_runends",
    ]
