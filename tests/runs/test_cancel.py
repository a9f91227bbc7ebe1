"""POST /v1/jobs/{id}/cancel (R-LC11): queued and running runs end `canceled` with
CANCELED_BY_USER, the engine's process group is killed, the slot is freed; a terminal run
answers accepted=false and changes nothing."""

from __future__ import annotations

import time

import pytest

from tests.support.jobs import create_job, haiku_step, processes_in, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def haiku(install_skill):
    install_skill("haiku-writer")


def _cancel(api, rid: str) -> dict:
    response = api.post(f"/v1/jobs/{rid}/cancel")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["request_id"] == rid
    # Upstream's fields (R-UP7): the run id again and a message for people; the rest is checked by each test.
    assert body.pop("run_id") == rid
    assert body.pop("message") == (
        "the run was canceled" if body["accepted"] else f"the run had already ended ({body['status']})"
    )
    return body


def _assert_canceled(api, rid: str) -> None:
    status = api.get(f"/v1/jobs/{rid}").json()
    assert status["status"] == "canceled"
    assert status["error"]["code"] == "CANCELED_BY_USER"
    result = api.get(f"/v1/jobs/{rid}/result")
    assert result.status_code == 200
    assert result.json()["result"]["status"] == "canceled"
    assert result.json()["result"]["error"]["code"] == "CANCELED_BY_USER"


def test_cancel_queued_run(api, fake_codex, manual_dispatch):
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    assert _cancel(api, rid) == {"request_id": rid, "status": "canceled", "accepted": True}
    _assert_canceled(api, rid)
    # The turn the queue still holds for it is a no-op: the engine never starts.
    manual_dispatch.run_inline(rid)
    assert fake_codex.invocations() == []
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "canceled"


def test_cancel_terminal_run_is_not_accepted_and_changes_nothing(api, fake_codex):
    from runs.models import Run

    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    before = Run.objects.get(pk=rid)
    assert before.status == "succeeded"
    assert _cancel(api, rid) == {"request_id": rid, "status": "succeeded", "accepted": False}
    after = Run.objects.get(pk=rid)
    assert (after.status, after.error, after.result, after.last_event_seq, after.updated_at) == (
        before.status,
        before.error,
        before.result,
        before.last_event_seq,
        before.updated_at,
    )


@pytest.mark.parametrize("step", [{"message": "no json"}, {"fail": "boom"}], ids=["failed", "engine-failed"])
def test_cancel_failed_run_is_not_accepted(api, fake_codex, step):
    fake_codex.script(step)
    rid = create_job(api)["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "failed"
    assert _cancel(api, rid)["accepted"] is False
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "failed"


def test_second_cancel_is_not_accepted(api, fake_codex, manual_dispatch):
    rid = create_job(api)["request_id"]
    assert _cancel(api, rid)["accepted"] is True
    seq = api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["last_seq"]
    assert _cancel(api, rid) == {"request_id": rid, "status": "canceled", "accepted": False}
    assert api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["last_seq"] == seq


def test_cancel_mid_turn_kills_the_engine(api, probing_codex, manual_dispatch, settings):
    """R-LC11: a cancel while the engine runs kills its process group promptly; the turn's own
    end never overwrites the canceled state."""
    from runs.models import Run

    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0
    probing_codex.fake.script(haiku_step(sleep=60))
    rid = create_job(api)["request_id"]
    thread = manual_dispatch.run_in_thread(rid)
    assert wait_until(
        lambda: probing_codex.spawns() and api.get(f"/v1/jobs/{rid}").json()["status"] == "running", timeout=10
    )
    run_dir = Run.objects.get(pk=rid).run_dir
    assert wait_until(lambda: len(processes_in(run_dir)) >= 2, timeout=5), "the engine and its child should run"

    started = time.monotonic()
    assert _cancel(api, rid) == {"request_id": rid, "status": "canceled", "accepted": True}
    thread.join(timeout=8)
    assert not thread.is_alive(), "the turn did not notice the cancel"
    assert time.monotonic() - started < 5
    assert wait_until(lambda: not processes_in(run_dir), timeout=3), "an engine process survived the cancel"

    _assert_canceled(api, rid)
    events = api.get(f"/v1/jobs/{rid}/events/history?after_seq=0").json()["events"]
    statuses = [e["payload"]["to"] for e in events if e["kind"] == "status"]
    assert statuses == ["queued", "running", "canceled"]
    assert [e["payload"]["status"] for e in events if e["kind"] == "result"] == ["canceled"]


def test_cancel_frees_the_slot_for_a_queued_run(api, fake_codex, manual_dispatch, settings):
    """R-LC11 + R-LC8: the canceled run's slot goes to the next queued run."""
    from runs.models import Run

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    fake_codex.script(haiku_step(sleep=60))
    first = create_job(api)["request_id"]
    thread = manual_dispatch.run_in_thread(first)
    assert wait_until(lambda: Run.objects.get(pk=first).status == "running" and fake_codex.invocations(), timeout=10)
    second = create_job(api)["request_id"]
    assert (second, 1) not in manual_dispatch.enqueued  # no slot for it yet
    assert _cancel(api, first)["accepted"] is True
    thread.join(timeout=8)
    assert not thread.is_alive()
    assert Run.objects.get(pk=first).holds_slot is False
    assert (second, 1) in manual_dispatch.enqueued


def test_cancel_of_a_run_waiting_for_its_upload(api, install_skill, fake_codex):
    install_skill("word-count")
    response = api.post("/v1/jobs", {"skill_id": "word-count", "engine": "codex", "input": {}}, format="json")
    rid = response.json()["request_id"]
    assert _cancel(api, rid)["accepted"] is True
    _assert_canceled(api, rid)
    from tests.support.jobs import make_zip, upload

    late = api.post(
        f"/v1/jobs/{rid}/upload", {"file": upload("in.zip", make_zip({"document": "a b"}))}, format="multipart"
    )
    assert late.status_code == 409
    assert fake_codex.invocations() == []


def test_reply_after_cancel_is_409(api, fake_codex, manual_dispatch):
    """R-LC11: later replies get 409 (interactive run canceled while queued)."""
    rid = create_job(api, runtime_options={"execution_mode": "interactive"})["request_id"]
    assert _cancel(api, rid)["accepted"] is True
    response = api.post(f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 1, "response": "hello"}, format="json")
    assert response.status_code == 409
