"""System endpoints (SPEC §8): ping, healthz, readyz, the engine catalogue and the skill catalogue."""

from __future__ import annotations

import os
import socket
import subprocess
from datetime import timedelta

import pytest
from django.utils import timezone

from engines.registry import ENGINE_NAMES
from tests.support.jobs import error_code

pytestmark = pytest.mark.django_db

ENGINES = set(ENGINE_NAMES)


@pytest.fixture
def engines(configure_engine, fake_codex, tmp_path):
    """codex = the scripted stand-in (version 0.0.0-fake); the others point at missing binaries."""
    for name in ENGINES - {"codex"}:
        configure_engine(name, binary=str(tmp_path / "missing" / name))
    configure_engine("codex", model="gpt-operator-default")


def test_ping_is_204_without_body(api):
    response = api.get("/v1/system/ping")
    assert response.status_code == 204
    assert response.content == b""


def test_healthz(api):
    response = api.get("/v1/system/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_readyz_without_a_worker_is_not_ready(api):
    """Readiness = database + a live worker that finished its start-up recovery; none runs here."""
    response = api.get("/v1/system/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not_ready"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["worker"] != "ok"


def _worker(*, host: str | None = None, pid: int | None = None, beat_age: float = 1.0, draining: bool = False):
    from runs.models import WorkerCluster

    now = timezone.now()
    return WorkerCluster.objects.create(
        token=f"t{WorkerCluster.objects.count()}",
        host=host or socket.gethostname(),
        pid=pid or os.getpid(),
        recovered_at=now - timedelta(seconds=beat_age),
        heartbeat_at=now - timedelta(seconds=beat_age),
        draining=draining,
    )


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_readyz_with_a_live_recovered_worker_is_ready(api):
    _worker()
    response = api.get("/v1/system/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "worker": "ok", "sandbox": "ok"}}


def test_readyz_with_only_a_draining_worker_says_draining(api):
    """R-OP10: a stopping worker lives on while its turns finish, but takes no more of them."""
    _worker(draining=True)
    response = api.get("/v1/system/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["worker"] == "draining"
    _worker()  # another one serves meanwhile
    assert api.get("/v1/system/readyz").status_code == 200


def test_readyz_with_a_fresh_worker_on_another_machine_is_ready(api):
    _worker(host="another-machine", pid=_dead_pid())
    assert api.get("/v1/system/readyz").status_code == 200


def test_readyz_with_a_stale_heartbeat_is_not_ready(api):
    _worker(beat_age=60)
    assert api.get("/v1/system/readyz").status_code == 503


def test_readyz_ignores_the_fresh_heartbeat_of_a_dead_worker(api):
    """R-OP7: a worker killed a second ago left a fresh heartbeat; its process is gone, so it
    never counts (on this machine the pid tells)."""
    _worker(pid=_dead_pid(), beat_age=0)
    response = api.get("/v1/system/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["worker"] == "no live worker has finished its start-up recovery"


@pytest.fixture
def readiness(monkeypatch):
    """The registry of readiness checks, as the apps left it; what a test registers goes with it."""
    from health import readiness

    monkeypatch.setattr(readiness, "_checks", list(readiness._checks))
    return readiness


def test_readyz_lists_a_registered_check_after_the_project_s_own(api, readiness):
    readiness.register("queue", lambda: "ok")
    _worker()
    response = api.get("/v1/system/readyz")
    assert response.status_code == 200, response.content
    assert list(response.json()["checks"].items()) == [
        ("database", "ok"),
        ("worker", "ok"),
        ("sandbox", "ok"),
        ("queue", "ok"),
    ]


def test_readyz_reports_a_check_that_raises_by_its_exception_type(api, readiness):
    def broken() -> str:
        raise ConnectionRefusedError("the broker is away")

    readiness.register("queue", broken)
    _worker()
    response = api.get("/v1/system/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "not_ready",
        "checks": {"database": "ok", "worker": "ok", "sandbox": "ok", "queue": "error: ConnectionRefusedError"},
    }


def test_readyz_counts_an_answer_a_check_allows_as_ready(api, readiness):
    readiness.register("queue", lambda: "degraded: one broker of two", also_ready={"degraded: one broker of two"})
    _worker()
    response = api.get("/v1/system/readyz")
    assert response.status_code == 200
    assert response.json()["checks"]["queue"] == "degraded: one broker of two"


def test_a_recovering_worker_clears_what_dead_workers_left(db):
    from runs import supervision
    from runs.models import WorkerCluster

    _worker(pid=_dead_pid())
    _worker(host="gone-machine", beat_age=7200)
    alive_elsewhere = _worker(host="another-machine")
    supervision.record_worker_recovered("mine")
    assert set(WorkerCluster.objects.values_list("token", flat=True)) == {"mine", alive_elsewhere.token}
    assert supervision.worker_check() == "ok"
    supervision.forget_worker("mine")
    assert not WorkerCluster.objects.filter(token="mine").exists()


def test_engine_list(api, engines):
    response = api.get("/v1/engines")
    assert response.status_code == 200
    listed = {e["engine"]: e for e in response.json()["engines"]}
    assert set(listed) == ENGINES
    for name in ENGINES - {"claude"}:
        assert listed[name]["interactive_profile"] == "resumable", name  # §7 table
    assert listed["claude"]["interactive_profile"] == "sticky_process"
    assert listed["codex"]["cli_version_detected"] == "0.0.0-fake"
    assert listed["codex"]["available"] is True
    for name in ENGINES - {"codex"}:
        assert listed[name]["available"] is False, name
        assert listed[name]["cli_version_detected"] is None, name
    assert not any("binary" in entry for entry in listed.values())


def test_engine_binary_paths_are_for_staff_only_R_FS3(staff_api, engines):
    listed = {e["engine"]: e for e in staff_api.get("/v1/engines").json()["engines"]}
    assert listed["codex"]["binary"].endswith("codex") and set(listed) == ENGINES


def test_engine_models(api, engines):
    response = api.get("/v1/engines/codex/models")
    assert response.status_code == 200
    body = response.json()
    assert body["engine"] == "codex"
    assert body["cli_version_detected"] == "0.0.0-fake"
    ids = [m["id"] for m in body["models"]]
    assert ids and all(isinstance(i, str) and i for i in ids)
    assert "gpt-operator-default" in ids


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_has_a_model_listing(api, engines, engine):
    response = api.get(f"/v1/engines/{engine}/models")
    assert response.status_code == 200
    assert response.json()["engine"] == engine
    assert isinstance(response.json()["models"], list)


@pytest.mark.parametrize("engine", ["no-such-engine", "CODEX", "..", "codex%00"])
def test_unknown_engine_is_404(api, engines, engine):
    response = api.get(f"/v1/engines/{engine}/models")
    assert response.status_code == 404
    if engine != "..":
        assert error_code(response) == "ENGINE_NOT_FOUND"


def test_skill_catalogue(api, install_skill):
    install_skill("haiku-writer")
    install_skill("trip-planner")
    listed = api.get("/v1/skills")
    assert listed.status_code == 200
    by_id = {s["id"]: s for s in listed.json()}
    assert set(by_id) == {"haiku-writer", "trip-planner"}
    trip = by_id["trip-planner"]
    assert trip["execution_modes"] == ["interactive"]
    assert trip["max_attempt"] == 4
    assert sorted(trip["effective_engines"]) == sorted(ENGINES)
    assert api.get("/v1/skills/trip-planner").json() == trip


def test_unknown_skill_is_404(api):
    response = api.get("/v1/skills/nope")
    assert response.status_code == 404
    assert error_code(response) == "SKILL_NOT_FOUND"
