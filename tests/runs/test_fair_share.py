"""Fair share (R-FS1): per-user caps on queued runs and on slots, round-robin dispatch by owner,
and runs waiting for their upload outside the global queue cap, expiring with UPLOAD_TIMEOUT."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.helpers import create_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def skills(install_skill):
    install_skill("haiku-writer")
    install_skill("word-count")


def _claim(request_id: str, worker: str = "host:1:w"):
    from runs import services

    return services.claim_turn(request_id, 1, worker)


def _status(request_id: str) -> str:
    from runs.models import Run

    return Run.objects.get(pk=request_id).status


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
