"""Offering queued turns to the task queue (runs.services.dispatching): with a real cluster every
process dispatches, so a queued run is offered by one process at a time and not again within the
window; a run queued anew is offered at once. (Here manual_dispatch holds the tasks back, as a
cluster's queue does until a worker takes them.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.jobs import create_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queued_tasks(install_skill, manual_dispatch, settings):
    """The task queue of a real cluster: tasks wait (recorded by manual_dispatch) until run."""
    install_skill("haiku-writer")
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 4
    settings.SKILLRUNNER_USER_MAX_RUNNING = 4
    return manual_dispatch.enqueued


def test_a_queued_run_is_offered_once_within_the_window(api, queued_tasks):
    from runs.services import dispatch_queued_runs

    first = create_job(api)["request_id"]
    second = create_job(api)["request_id"]
    assert queued_tasks == [(first, 1), (second, 1)]  # each offered when created
    assert dispatch_queued_runs() == 0  # a release or a tick meanwhile, in any process
    assert queued_tasks == [(first, 1), (second, 1)]


def test_a_run_whose_task_found_no_slot_is_offered_again_when_a_slot_frees(api, queued_tasks, settings):
    from runs.models import Run
    from runs.services import cancel_run, claim_turn

    first = create_job(api)["request_id"]
    second = create_job(api)["request_id"]
    assert queued_tasks == [(first, 1), (second, 1)]
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    assert claim_turn(first, 1, "host:1:w") is not None
    assert claim_turn(second, 1, "host:1:w") is None  # its task, consumed while no slot is free
    assert Run.objects.get(pk=second).offered_at is None
    cancel_run(Run.objects.get(pk=first))  # the slot frees: offered at once, not after the window
    assert queued_tasks == [(first, 1), (second, 1), (second, 1)]


def test_a_run_whose_task_was_lost_is_offered_again_after_the_window(api, queued_tasks):
    from runs.models import Run
    from runs.services import dispatch_queued_runs
    from runs.services.dispatching import REOFFER_AFTER

    request_id = create_job(api)["request_id"]
    offered = Run.objects.get(pk=request_id).offered_at
    Run.objects.filter(pk=request_id).update(offered_at=offered - REOFFER_AFTER - timedelta(seconds=1))
    assert dispatch_queued_runs() == 1
    assert queued_tasks == [(request_id, 1), (request_id, 1)]
    assert Run.objects.get(pk=request_id).offered_at > offered


def test_a_run_the_broker_refused_is_offered_again_at_the_next_dispatch(
    api, queued_tasks, manual_dispatch, monkeypatch
):
    from runs.models import Run
    from runs.services import dispatch_queued_runs

    def refused(request_id, attempt_number):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr("runs.task_queue.enqueue_turn", refused)
    request_id = create_job(api)["request_id"]
    assert Run.objects.get(pk=request_id).offered_at is None
    monkeypatch.setattr("runs.task_queue.enqueue_turn", manual_dispatch)  # the broker is back
    assert dispatch_queued_runs() == 1  # the supervisor's next tick, well within the window
    assert queued_tasks == [(request_id, 1)]


def test_another_process_that_read_the_same_offer_does_not_offer_it_too(api, queued_tasks):
    from runs.models import Run
    from runs.services.dispatching import REOFFER_AFTER, _take_offer

    request_id = create_job(api)["request_id"]
    stale = Run.objects.get(pk=request_id).offered_at - REOFFER_AFTER - timedelta(seconds=1)
    Run.objects.filter(pk=request_id).update(offered_at=stale)
    assert _take_offer(request_id, stale) is True  # the first of two processes that read `stale`
    assert _take_offer(request_id, stale) is False  # the second: the compare-and-set fails


def test_a_run_queued_anew_is_offered_at_once(api, fake_codex, queued_tasks):
    """A reply (or a repair round) queues the run again: its next turn must not wait out the
    window of the offer of its first turn."""
    from django.db import transaction

    from runs.models import Run
    from runs.services import claim_turn, dispatch_queued_runs
    from runs.services.lifecycle import locked, transition

    request_id = create_job(api)["request_id"]
    assert claim_turn(request_id, 1, "host:1:w") is not None
    assert queued_tasks == [(request_id, 1)]
    with transaction.atomic():
        transition(locked(request_id), "queued")
    assert queued_tasks == [(request_id, 1), (request_id, 1)]  # offered again on commit
    assert Run.objects.get(pk=request_id).offered_at is not None
    assert dispatch_queued_runs() == 0


def test_a_turn_task_queued_under_its_old_name_only_delays_the_run(api, queued_tasks):
    """Turn tasks queued before the worker left `runs` name a function that is gone: such a task
    fails without touching the run, which stays queued, and is offered again under the new name
    once its offer is stale, like any lost task."""
    import pydoc

    from django_q.tasks import async_task

    from runs.models import Run
    from runs.services import dispatch_queued_runs
    from runs.services.dispatching import REOFFER_AFTER
    from runs.task_queue import TURN_TASK

    request_id = create_job(api)["request_id"]
    with pytest.raises(ValueError, match="runs.tasks.execute_turn is not defined"):
        async_task("runs.tasks.execute_turn", request_id, 1)  # the sync cluster raises what a worker records
    run = Run.objects.get(pk=request_id)
    assert run.status == "queued" and run.attempt_number == 1
    Run.objects.filter(pk=request_id).update(offered_at=run.offered_at - REOFFER_AFTER - timedelta(seconds=1))
    assert dispatch_queued_runs() == 1
    assert queued_tasks == [(request_id, 1), (request_id, 1)]
    assert callable(pydoc.locate(TURN_TASK))  # the name enqueued now resolves in the worker


def test_an_owners_oldest_runs_are_read_with_few_compiled_limits(api, queued_tasks):
    """Each number of free slots was a statement of its own to compile (its LIMIT): 16 at cap 16."""
    from runs.services import dispatching

    created = [create_job(api)["request_id"] for _ in range(6)]
    owner = dispatching.Run.objects.get(pk=created[0]).owner_id
    compiled_before = set(dispatching._OLDEST_READY_RUNS._prepared)
    for limit in range(1, 17):
        oldest = dispatching._oldest_ready_runs(owner, limit)
        assert [str(turn.request_id) for turn in oldest] == created[:limit]
    compiled = set(dispatching._OLDEST_READY_RUNS._prepared) - compiled_before
    assert compiled <= {(1,), (2,), (4,), (8,), (16,)}
