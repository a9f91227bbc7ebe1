"""Admission of POST /v1/jobs (R-AD1, R-AD2, R-AD3, R-AD5): refusals are coded 400s and create nothing.

These tests run inside one transaction, so no turn is ever dispatched: admitted runs stay queued.
"""

from __future__ import annotations

import uuid

import pytest

from engines.registry import ENGINE_NAMES
from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import clone_skill, detail, error_code, job_body

pytestmark = pytest.mark.django_db


def _assert_nothing_created(settings):
    from runs.models import Run, RunEvent

    assert Run.objects.count() == 0
    assert RunEvent.objects.count() == 0
    runs_dir = settings.DATA_DIR / "runs"
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


@pytest.fixture
def picky_skill(install_skill, tmp_path):
    """Runs on codex and claude only: engines allow-list minus an unsupported entry (R-SK3)."""
    folder = clone_skill(
        BUNDLED_SKILLS / "haiku-writer",
        tmp_path / "pkgs",
        skill_id="picky-haiku",
        manifest={
            "engines": ["codex", "gemini", "claude"],
            "unsupported_engines": ["iflow"],
            "execution_modes": ["auto"],
        },
    )
    folder2 = clone_skill(
        BUNDLED_SKILLS / "haiku-writer",
        tmp_path / "pkgs",
        skill_id="no-gemini-haiku",
        manifest={"unsupported_engines": ["gemini"]},
    )
    install_skill("picky-haiku", root=folder.parent)
    install_skill("no-gemini-haiku", root=folder2.parent)


def test_missing_execution_mode_means_auto(api, install_skill):
    """R-AD1: a request with no runtime_options (an existing auto client) is an auto run."""
    install_skill("haiku-writer")
    response = api.post("/v1/jobs", {"skill_id": "haiku-writer", "input": {"topic": "sea"}}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) >= {"request_id", "cache_hit", "status"}
    uuid.UUID(body["request_id"])
    assert body["cache_hit"] is False
    assert body["status"] == "queued"
    status = api.get(f"/v1/jobs/{body['request_id']}").json()
    assert status["execution_mode"] == "auto"
    assert status["engine"] == "codex"  # upstream default engine
    assert status["skill_id"] == "haiku-writer"


def test_explicit_modes_are_recorded(api, install_skill):
    install_skill("haiku-writer")
    for mode in ("auto", "interactive"):
        response = api.post("/v1/jobs", job_body(runtime_options={"execution_mode": mode}), format="json")
        assert response.status_code == 200, response.content
        assert api.get(f"/v1/jobs/{response.json()['request_id']}").json()["execution_mode"] == mode


def test_interactive_on_auto_only_skill_is_refused(api, install_skill, settings):
    """R-AD2: mode not declared → 400 SKILL_EXECUTION_MODE_UNSUPPORTED, no run."""
    install_skill("dice-pair")
    response = api.post(
        "/v1/jobs", job_body("dice-pair", runtime_options={"execution_mode": "interactive"}), format="json"
    )
    assert response.status_code == 400
    body = detail(response)
    assert body["code"] == "SKILL_EXECUTION_MODE_UNSUPPORTED"
    assert body["message"]
    assert body["declared_execution_modes"] == ["auto"]
    assert body["requested_execution_mode"] == "interactive"
    _assert_nothing_created(settings)


def test_default_auto_on_interactive_only_skill_is_refused(api, install_skill, settings):
    """R-AD1 + R-AD2: no mode means auto, which an interactive-only skill does not declare."""
    install_skill("trip-planner")
    response = api.post("/v1/jobs", {"skill_id": "trip-planner", "engine": "codex"}, format="json")
    assert response.status_code == 400
    assert error_code(response) == "SKILL_EXECUTION_MODE_UNSUPPORTED"
    _assert_nothing_created(settings)


@pytest.mark.parametrize(
    "skill_id,engine,effective",
    [
        ("picky-haiku", "iflow", ["codex", "gemini", "claude"]),  # listed in unsupported_engines
        ("no-gemini-haiku", "gemini", [e for e in ENGINE_NAMES if e != "gemini"]),  # deny-list only
        ("picky-haiku", "nonsense-engine", ["codex", "gemini", "claude"]),  # not an engine at all
    ],
)
def test_engine_outside_effective_engines_is_refused(api, picky_skill, settings, skill_id, engine, effective):
    """R-AD3: engine not in effective_engines → 400 SKILL_ENGINE_UNSUPPORTED, no run."""
    response = api.post("/v1/jobs", job_body(skill_id, engine=engine, input={"topic": "sea"}), format="json")
    assert response.status_code == 400
    body = detail(response)
    assert body["code"] == "SKILL_ENGINE_UNSUPPORTED"
    assert sorted(body["effective_engines"]) == sorted(effective)
    assert body["requested_engine"] == engine
    _assert_nothing_created(settings)


def test_engine_inside_effective_engines_is_admitted(api, picky_skill):
    for skill_id, engine in (("picky-haiku", "claude"), ("no-gemini-haiku", "iflow")):
        response = api.post("/v1/jobs", job_body(skill_id, engine=engine, input={"topic": "sea"}), format="json")
        assert response.status_code == 200, response.content


def test_skill_listing_shows_effective_engines(api, picky_skill):
    body = api.get("/v1/skills/no-gemini-haiku").json()
    assert body["unsupported_engines"] == ["gemini"]
    assert sorted(body["effective_engines"]) == sorted(e for e in ENGINE_NAMES if e != "gemini")


def test_unknown_skill_is_404(api, settings):
    response = api.post("/v1/jobs", job_body("no-such-skill"), format="json")
    assert response.status_code == 404
    assert error_code(response) == "SKILL_NOT_FOUND"
    _assert_nothing_created(settings)


def test_schema_errors_of_input_and_parameter_are_all_listed(api, install_skill, settings):
    """R-AD5: both objects are validated before a run exists, and every error is reported."""
    install_skill("haiku-writer")
    response = api.post(
        "/v1/jobs",
        job_body(input={"topic": "", "colour": "red"}, parameter={"mood": "furious"}),
        format="json",
    )
    assert response.status_code == 400
    body = detail(response)
    assert body["code"] == "INPUT_VALIDATION_FAILED"
    errors = body["errors"]
    joined = "\n".join(errors)
    assert len(errors) >= 3, errors
    assert "topic" in joined  # too short
    assert "colour" in joined  # additional property
    assert "mood" in joined and "furious" in joined  # not in the enum
    _assert_nothing_created(settings)


def test_missing_required_input_is_refused(api, install_skill, settings):
    install_skill("haiku-writer")
    response = api.post("/v1/jobs", job_body(input={}), format="json")
    assert response.status_code == 400
    assert error_code(response) == "INPUT_VALIDATION_FAILED"
    assert any("topic" in e for e in detail(response)["errors"])
    _assert_nothing_created(settings)


def test_required_parameter_is_enforced(api, install_skill, settings):
    """proverb-card requires parameter.language (an upstream-layout package, installed unchanged)."""
    install_skill("proverb-card")
    response = api.post("/v1/jobs", job_body("proverb-card"), format="json")
    assert response.status_code == 400
    assert any("language" in e for e in detail(response)["errors"])
    ok = api.post("/v1/jobs", job_body("proverb-card", parameter={"language": "Latin"}), format="json")
    assert ok.status_code == 200, ok.content


def test_full_queue_answers_429_and_creates_nothing(api, install_skill, settings):
    """SPEC §8: queue full → 429."""
    from runs.models import Run

    install_skill("haiku-writer")
    settings.SKILLRUNNER_MAX_QUEUED_RUNS = 2
    for _ in range(2):
        assert api.post("/v1/jobs", job_body(), format="json").status_code == 200
    response = api.post("/v1/jobs", job_body(), format="json")
    assert response.status_code == 429
    assert error_code(response) == "QUEUE_FULL"
    assert Run.objects.count() == 2


def test_admitted_run_records_the_skill_version_it_runs(api, install_skill):
    """R-SK6: a run is tied to the version current at creation."""
    from runs.models import Run

    install_skill("haiku-writer")
    rid = api.post("/v1/jobs", job_body(), format="json").json()["request_id"]
    run = Run.objects.get(pk=rid)
    assert run.skill_version.version == "1.0.0"
    assert api.get(f"/v1/jobs/{rid}").json()["skill_version"] == "1.0.0"
