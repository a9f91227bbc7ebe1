"""Ownership (SPEC §8): a user sees only their own runs, another user's run is a 404 everywhere,
indistinguishable from a run that does not exist; staff see all."""

from __future__ import annotations

import uuid

import pytest

from tests.support.jobs import RUN_ENDPOINTS, create_job, error_code, haiku_step, make_zip, upload

pytestmark = pytest.mark.django_db(transaction=True)


def _request(client, method: str, rid: str, suffix: str):
    path = f"/v1/jobs/{rid}{suffix}"
    if suffix == "/upload":
        return client.post(path, {"file": upload("in.zip", make_zip({"document": "x"}))}, format="multipart")
    if suffix == "/interaction/reply":
        return client.post(path, {"interaction_id": 1, "response": "yes"}, format="json")
    return client.post(path, {}, format="json") if method == "post" else client.get(path)


@pytest.fixture
def alice_run(api, install_skill, fake_codex) -> str:
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    return rid


def test_foreign_run_is_404_on_every_run_endpoint(bob_api, alice_run):
    """Every run endpoint answers bob's request for alice's run with RUN_NOT_FOUND."""
    wrong = {}
    for method, suffix in RUN_ENDPOINTS:
        response = _request(bob_api, method, alice_run, suffix)
        if response.status_code != 404 or error_code(response) != "RUN_NOT_FOUND":
            wrong[f"{method} {suffix}"] = (response.status_code, response.content[:200])
    assert wrong == {}


def test_foreign_run_looks_exactly_like_a_missing_one(bob_api, alice_run):
    """No existence oracle: the 404 bodies differ only by the id echoed back."""
    unknown = str(uuid.uuid4())
    for method, suffix in RUN_ENDPOINTS:
        foreign = _request(bob_api, method, alice_run, suffix)
        missing = _request(bob_api, method, unknown, suffix)
        assert foreign.status_code == missing.status_code == 404, suffix
        assert foreign.content.decode().replace(alice_run, "ID") == missing.content.decode().replace(unknown, "ID"), (
            suffix
        )


def test_foreign_cancel_changes_nothing(api, bob_api, alice_run):
    from runs.models import Run

    before = Run.objects.get(pk=alice_run)
    assert bob_api.post(f"/v1/jobs/{alice_run}/cancel").status_code == 404
    after = Run.objects.get(pk=alice_run)
    assert (after.status, after.last_event_seq, after.error) == (before.status, before.last_event_seq, before.error)


def test_run_list_shows_only_own_runs(api, bob_api, alice_run, fake_codex):
    bob_run = create_job(bob_api)["request_id"]
    alice_ids = [r["request_id"] for r in api.get("/v1/jobs").json()["results"]]
    bob_ids = [r["request_id"] for r in bob_api.get("/v1/jobs").json()["results"]]
    assert alice_ids == [alice_run]
    assert bob_ids == [bob_run]


def test_staff_see_every_run(staff_api, api, bob_api, alice_run):
    bob_run = create_job(bob_api)["request_id"]
    listed = {r["request_id"] for r in staff_api.get("/v1/jobs").json()["results"]}
    assert listed == {alice_run, bob_run}
    for rid in (alice_run, bob_run):
        assert staff_api.get(f"/v1/jobs/{rid}").status_code == 200
        assert staff_api.get(f"/v1/jobs/{rid}/result").status_code == 200
        assert staff_api.get(f"/v1/jobs/{rid}/artifacts/artifacts/haiku.md").status_code == 200


def test_owner_can_use_every_read_endpoint(api, alice_run):
    """The control for the 404s above: the same reads succeed for the owner."""
    for suffix in (
        "",
        "/interaction/history",
        "/result",
        "/artifacts",
        "/artifacts/artifacts/haiku.md",
        "/bundle",
        "/logs",
        "/logs?attempt=1&stream=stdout",
        "/events/history",
    ):
        response = api.get(f"/v1/jobs/{alice_run}{suffix}")
        assert response.status_code == 200, (suffix, response.content[:200])
