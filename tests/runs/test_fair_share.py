"""Fair share (R-FS1): per-user caps on queued runs and on slots, round-robin dispatch by owner
(fewest slots held, then served least recently) at a cost that does not grow with the backlog
(R-SC1), and runs waiting for their upload outside the global queue cap, expiring with
UPLOAD_TIMEOUT."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.backlog import bulk_runs
from tests.support.jobs import HAIKU_DATA, create_job, make_zip

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def skills(install_skill):
    install_skill("haiku-writer")
    install_skill("word-count")


@pytest.fixture
def every_dispatch_offers_anew(monkeypatch):
    """Each dispatch offers the runs next in turn though they were offered a moment ago, and
    writes no offer: for tests that drop the tasks recorded so far and dispatch again to see the
    order the slots go in (and what that reads). Offers are tests/runs/test_offers.py's subject."""
    monkeypatch.setattr("runs.services.dispatching._take_offer", lambda request_id, offered_at: True)


def _claim(request_id: str, worker: str = "host:1:w"):
    from runs import services

    return services.claim_turn(request_id, 1, worker)


def _status(request_id: str) -> str:
    from runs.models import Run

    return Run.objects.get(pk=request_id).status


def _finish(request_id: str, worker: str = "host:1:w") -> None:
    """The turn ends well (complete_turn): its slot frees, and the next turns are dispatched."""
    from engines.types import TurnResult
    from runs import services
    from runs.outcome import TurnDecision

    turn = TurnResult(outcome="final", final_data=HAIKU_DATA, exit_code=0)
    assert services.complete_turn(request_id, 1, worker, turn, TurnDecision("succeeded", data=HAIKU_DATA)) is not None


def _take_turns(started: list[str], manual_dispatch, turns: int) -> list[str]:
    """Finish the oldest running turn `turns` times; each time the one turn dispatched starts,
    after every other queued run's task (a stale or redelivered one) was refused the slot."""
    from runs.models import Run

    running = list(started)
    for _ in range(turns):
        manual_dispatch.enqueued.clear()
        _finish(running.pop(0))
        ((offered, _),) = manual_dispatch.enqueued
        for other in Run.objects.filter(status="queued").exclude(pk=offered).values_list("pk", flat=True):
            assert _claim(str(other)) is None
        assert _claim(offered) is not None
        running.append(offered)
        started.append(offered)
    return started


@pytest.mark.usefixtures("every_dispatch_offers_anew")
def test_a_flooding_user_does_not_starve_another_R_FS1(settings, api, bob_api, manual_dispatch):
    """Alice fills both slots and queues more; the first slot to free up goes to Bob's run, and a
    stale task of Alice's cannot take it first."""
    from runs import services
    from runs.models import Run

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 2
    settings.SKILLRUNNER_USER_MAX_RUNNING = 2
    alices = [create_job(api)["request_id"] for _ in range(6)]
    assert _claim(alices[0]) and _claim(alices[1])
    assert _claim(alices[2]) is None  # no free slot
    bobs = create_job(bob_api)["request_id"]
    assert _claim(bobs) is None

    services.cancel_run(Run.objects.get(pk=alices[0]))  # one slot turns over
    manual_dispatch.enqueued.clear()
    assert services.dispatch_queued_runs() == 1
    assert manual_dispatch.enqueued == [(bobs, 1)]
    assert _claim(alices[2]) is None  # an earlier task of Alice's: the free slot is owed to Bob
    assert _claim(bobs) is not None and _status(bobs) == "running"
    assert _status(alices[2]) == "queued"


@pytest.mark.usefixtures("every_dispatch_offers_anew")
def test_round_robin_by_owner_when_several_slots_free_R_FS1(settings, api, bob_api, staff_api, manual_dispatch):
    from runs import services

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 3
    settings.SKILLRUNNER_USER_MAX_RUNNING = 3
    alices = [create_job(api)["request_id"] for _ in range(3)]
    bobs = [create_job(bob_api)["request_id"] for _ in range(2)]
    staffs = create_job(staff_api)["request_id"]
    manual_dispatch.enqueued.clear()
    assert services.dispatch_queued_runs() == 3
    assert manual_dispatch.enqueued == [(alices[0], 1), (bobs[0], 1), (staffs, 1)]


def test_at_a_cap_of_one_two_users_take_turns_R_FS1(settings, api, bob_api, manual_dispatch):
    """Bob queues five runs and Alice three while Bob's first runs: from then on they alternate,
    though Bob's runs are all older than Alice's."""
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    settings.SKILLRUNNER_USER_MAX_RUNNING = 1
    bobs = [create_job(bob_api)["request_id"] for _ in range(5)]
    assert _claim(bobs[0]) is not None
    alices = [create_job(api)["request_id"] for _ in range(3)]
    started = _take_turns([bobs[0]], manual_dispatch, 7)
    assert started == [bobs[0], alices[0], bobs[1], alices[1], bobs[2], alices[2], bobs[3], bobs[4]]


@pytest.mark.usefixtures("every_dispatch_offers_anew")
def test_three_users_share_two_slots_in_turn_R_FS1(settings, api, bob_api, staff_api, manual_dispatch):
    """Two free slots go to two owners; each freed slot then goes to whoever holds none and was
    served least recently (Staff, never served, before Alice, whose turn just ended)."""
    from runs import services

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 2
    settings.SKILLRUNNER_USER_MAX_RUNNING = 2
    alices = [create_job(api)["request_id"] for _ in range(3)]
    bobs = [create_job(bob_api)["request_id"] for _ in range(3)]
    staffs = [create_job(staff_api)["request_id"] for _ in range(3)]
    manual_dispatch.enqueued.clear()
    assert services.dispatch_queued_runs() == 2
    assert manual_dispatch.enqueued == [(alices[0], 1), (bobs[0], 1)]
    assert _claim(alices[1]) is None  # not Alice's second while Bob holds no slot
    assert _claim(alices[0]) is not None and _claim(bobs[0]) is not None
    started = _take_turns([alices[0], bobs[0]], manual_dispatch, 7)
    assert started == [alices[0], bobs[0], staffs[0], alices[1], bobs[1], staffs[1], alices[2], bobs[2], staffs[2]]


@pytest.mark.usefixtures("every_dispatch_offers_anew")
def test_a_user_at_their_slot_cap_is_skipped_without_blocking_others_R_FS1(settings, api, bob_api, manual_dispatch):
    """Alice holds her one slot and her queued runs are the oldest; the free slots go to Bob's
    run, and the others stay free rather than go to her."""
    from runs import services

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 4
    settings.SKILLRUNNER_USER_MAX_RUNNING = 1
    alices = [create_job(api)["request_id"] for _ in range(3)]
    assert _claim(alices[0]) is not None
    bobs = create_job(bob_api)["request_id"]
    manual_dispatch.enqueued.clear()
    assert services.dispatch_queued_runs() == 1
    assert manual_dispatch.enqueued == [(bobs, 1)]
    assert _claim(alices[1]) is None and _status(alices[1]) == "queued"
    assert _claim(bobs) is not None


def test_a_redelivered_task_cannot_jump_the_order_R_FS1(settings, api, bob_api, manual_dispatch):
    """At a cap of 1 Alice's turn ends while Bob waits: a task of Alice's delivered again (her
    next run's, or a later one's) finds the slot owed to Bob; once Bob's turn started, neither
    may Bob's second run go before Alice's next."""
    from runs.models import Run

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    settings.SKILLRUNNER_USER_MAX_RUNNING = 1
    alices = [create_job(api)["request_id"] for _ in range(3)]
    assert _claim(alices[0]) is not None
    bobs = [create_job(bob_api)["request_id"] for _ in range(2)]
    _finish(alices[0])
    assert _claim(alices[1]) is None and _claim(alices[2]) is None
    assert Run.objects.get(pk=alices[1]).offered_at is None  # its task is used up: it is offered again
    assert _claim(bobs[0]) is not None
    _finish(bobs[0])
    assert _claim(bobs[1]) is None and _claim(alices[2]) is None  # Alice's oldest goes first
    assert _claim(alices[1]) is not None


def test_a_place_left_wrong_by_a_change_outside_the_services_is_put_right(settings, api, bob_api, manual_dispatch):
    """Runs ended behind the services' back leave their owner's place in the order: the next
    dispatch that finds none of its runs removes it, and Bob's run is offered next."""
    from runs import services
    from runs.models import OwnerQueue, Run

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    alices = create_job(api)["request_id"]
    bobs = create_job(bob_api)["request_id"]
    Run.objects.filter(pk=alices).update(status="canceled")
    manual_dispatch.enqueued.clear()
    assert services.dispatch_queued_runs() == 0
    assert OwnerQueue.objects.get(owner__username="alice").oldest_ready_at is None
    assert services.dispatch_queued_runs() == 1 and manual_dispatch.enqueued == [(bobs, 1)]


@pytest.mark.usefixtures("every_dispatch_offers_anew")
def test_dispatch_reads_no_more_with_thousands_queued_R_SC1(settings, api, manual_dispatch, django_user_model):
    """5,000 queued runs of 200 users, and 3 users holding 6 of 8 slots at their cap of 2 with the
    oldest queued runs: the 2 free slots go to the 2 users first in the order, holders are
    skipped, and choosing them takes as many statements as with 50 runs queued."""
    from runs import services
    from runs.models import Run

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 8
    settings.SKILLRUNNER_USER_MAX_RUNNING = 2
    users = django_user_model.objects.bulk_create(django_user_model(username=f"user-{n:03}") for n in range(203))
    holders, waiting = users[:3], users[3:]

    def dispatched() -> tuple[list[str], int]:
        manual_dispatch.enqueued.clear()
        with CaptureQueriesContext(connection) as statements:
            services.dispatch_queued_runs()
        # No read of the runs is unbounded but the slot holders': the old dispatch read the queue
        # whole in one statement, which a count of statements alone does not tell apart.
        reads = [query["sql"] for query in statements.captured_queries if query["sql"].startswith("SELECT")]
        unbounded = [sql for sql in reads if '"runs_run"' in sql and "LIMIT" not in sql and '"holds_slot"' not in sql]
        assert unbounded == []
        return [Run.objects.get(pk=request_id).owner.username for request_id, _ in manual_dispatch.enqueued], len(
            statements
        )

    bulk_runs(holders, 6, status="running", holds_slot=True)
    bulk_runs(holders, 30)
    bulk_runs(waiting[:20], 20)
    few = dispatched()
    bulk_runs(waiting, 5_000 - 50)
    assert Run.objects.filter(status="queued").count() == 5_000
    assert dispatched() == few == (["user-003", "user-004"], few[1])
    assert few[1] <= 4  # slot holders, the first places, one read of each chosen owner's runs
    first = Run.objects.filter(owner__username="user-003", status="queued").order_by("created_at").first()
    assert first is not None and _claim(str(first.pk)) is not None
    held = Run.objects.filter(owner=holders[0], status="queued").order_by("created_at").first()
    assert held is not None and _claim(str(held.pk)) is None  # at the cap of 2


def test_the_dispatch_read_returns_only_the_idle_owners_the_free_slots_can_go_to_R_SC1(
    settings, api, manual_dispatch, django_user_model
):
    """Of the owners holding no slot, in turn order, the dispatch read returns as many as there
    are free slots, counted by the statement itself: limited to the cap, it returned the places of
    16 idle owners (with their oldest runs) beside 200 owners waiting, for the one slot a release
    frees. With more slots held than the cap (lowered meanwhile) it returns none of them, where a
    negative LIMIT would have returned them all on SQLite."""
    from runs.services.dispatching import DISPATCH_READ, dispatch_state

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 8
    settings.SKILLRUNNER_USER_MAX_RUNNING = 2
    users = django_user_model.objects.bulk_create(django_user_model(username=f"user-{n:03}") for n in range(23))
    holders, waiting = users[:3], users[3:]
    bulk_runs(holders, 6, status="running", holds_slot=True)
    bulk_runs(holders, 6)
    bulk_runs(waiting, 40)
    state = dispatch_state()
    assert (state.in_use, state.free) == (6, 2)
    idle = [place.owner_id for place in state.places if not place.holding]
    assert idle == [waiting[0].pk, waiting[1].pk]  # never served, then by their oldest ready run
    assert sorted(place.owner_id for place in state.places if place.holding) == sorted(user.pk for user in holders)
    assert len(DISPATCH_READ.rows(8)) == 2 + len(holders)  # the statement's own rows

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 4
    state = dispatch_state()
    assert (state.in_use, state.free) == (6, -2)
    assert sorted(place.owner_id for place in state.places) == sorted(user.pk for user in holders)


def _unbounded_reads_of_runs(statements) -> list[str]:
    """Reads of the runs table neither limited nor narrowed to one owner's or one run's rows."""
    unbounded = []
    for query in statements.captured_queries:
        sql = query["sql"]
        if sql.startswith("SELECT") and 'FROM "runs_run"' in sql:
            narrowed = sql.split('FROM "runs_run"', 1)[1]  # what follows FROM: a FILTER narrows nothing
            if not any(bound in narrowed for bound in ("LIMIT", '"owner_id" =', '"request_id" =', '"holds_slot"')):
                unbounded.append(sql)
    return unbounded


def test_creating_a_run_reads_no_more_with_thousands_queued_R_SC1(settings, api, manual_dispatch, django_user_model):
    """The queue caps are checked without reading the backlog: with 5,000 runs of 200 users
    queued, creating one takes the statements it takes with 50, none reading the queue."""
    settings.SKILLRUNNER_MAX_QUEUED_RUNS = 10_000
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 0  # no turn is offered: dispatch has its test above
    users = django_user_model.objects.bulk_create(django_user_model(username=f"user-{n:03}") for n in range(200))

    def created() -> int:
        with CaptureQueriesContext(connection) as statements:
            create_job(api)
        assert _unbounded_reads_of_runs(statements) == []
        return len(statements)

    bulk_runs(users, 50)
    create_job(api)  # the first also makes the owner's place
    few = created()
    bulk_runs(users, 5_000 - 50)
    assert created() == few


def test_the_queue_length_follows_every_way_in_and_out_R_SC1(settings, api, bob_api, manual_dispatch):
    """The queue's length kept in the owners' places is the number of ready runs after runs are
    created, claimed, canceled, finished and given their upload, and the global cap counts it."""
    from django.db.models import Count, Min, Sum

    from runs import services
    from runs.models import OwnerQueue, Run
    from runs.services.dispatching import ready_places, ready_runs

    def length() -> int:
        """The queue's length from the owners' places, each place checked against its owner's
        ready runs as owner_queue_changed would write it (the incremental updates write both)."""
        for place in OwnerQueue.objects.all():
            ready = ready_runs().filter(owner_id=place.owner_id)
            truth = ready.aggregate(oldest=Min("created_at"), count=Count("pk"))
            assert (place.oldest_ready_at, place.ready_count) == (truth["oldest"], truth["count"]), place.owner_id
        queued = ready_places().aggregate(length=Sum("ready_count"))["length"] or 0
        assert queued == ready_runs().count()
        return queued

    settings.SKILLRUNNER_MAX_QUEUED_RUNS = 4
    alices = [create_job(api)["request_id"] for _ in range(3)]
    waiting = create_job(api, "word-count")["request_id"]  # waits for its upload: not ready
    bobs = create_job(bob_api)["request_id"]
    assert length() == 4
    full = api.post("/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "x"}}, format="json")
    assert full.status_code == 429 and full.json()["detail"]["scope"] == "all"
    assert _claim(alices[0]) is not None and length() == 3
    services.cancel_run(Run.objects.get(pk=alices[1]))
    assert length() == 2
    _finish(alices[0])
    services.attach_upload(Run.objects.get(pk=waiting), io.BytesIO(make_zip({"document": "two words\n"})))
    assert length() == 3
    services.cancel_run(Run.objects.get(pk=bobs))
    assert length() == 2 and Run.objects.filter(status="queued").count() == 2


def test_per_user_slot_cap_R_FS1(settings, api, bob_api, manual_dispatch):
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 4
    settings.SKILLRUNNER_USER_MAX_RUNNING = 1
    alices = [create_job(api)["request_id"] for _ in range(3)]
    assert {request_id for request_id, _ in manual_dispatch.enqueued} == {alices[0]}
    assert _claim(alices[0]) is not None
    assert _claim(alices[1]) is None and _status(alices[1]) == "queued"
    bobs = create_job(bob_api)["request_id"]
    assert _claim(bobs) is not None  # free slots remain for the others


def test_per_user_queue_cap_R_FS1(settings, api, bob_api, manual_dispatch):
    settings.SKILLRUNNER_USER_MAX_QUEUED = 2
    create_job(api)
    create_job(api)
    refused = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "x"}}, format="json"
    )
    assert refused.status_code == 429
    assert refused.json()["detail"] == {
        "code": "QUEUE_FULL",
        "message": "you have 2 queued runs, the most one user may have; try again when some have started",
        "scope": "user",
    }
    create_job(bob_api)  # Bob's share is his own


def test_upload_waiting_runs_are_outside_the_global_cap_and_expire_R_FS1(settings, api, manual_dispatch):
    from runs.models import Run
    from runs.supervision import expire_uploads

    settings.SKILLRUNNER_MAX_QUEUED_RUNS = 1
    waiting = [create_job(api, "word-count")["request_id"] for _ in range(3)]
    assert all(Run.objects.get(pk=rid).awaiting_upload for rid in waiting)
    create_job(api)  # the only global queue place is still free
    full = api.post("/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "x"}}, format="json")
    assert full.status_code == 429 and full.json()["detail"]["scope"] == "all"

    settings.SKILLRUNNER_UPLOAD_TIMEOUT_SECONDS = 60
    Run.objects.filter(pk__in=waiting[:2]).update(
        created_at=Run.objects.get(pk=waiting[2]).created_at - timedelta(seconds=61)
    )
    assert expire_uploads() == 2
    for rid in waiting[:2]:
        body = api.get(f"/v1/jobs/{rid}").json()
        assert body["status"] == "failed" and body["error"]["code"] == "UPLOAD_TIMEOUT"
    assert _status(waiting[2]) == "queued"
    assert expire_uploads() == 0
