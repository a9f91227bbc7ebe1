"""Execution modes and admission of interactive runs (R-AD1, R-AD2, R-AD3) and the mode-aware
patch the agent gets in each mode (R-PA3, R-PA4), as seen through the job API."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import BUNDLED_SKILLS
from tests.support.conversations import (
    AUTO_FRESH,
    INTERACTIVE,
    ask,
    error_code,
    haiku_done,
    interactive_job,
    plan_done,
    start,
    status_of,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _trip_planner_with(tmp_path: Path, **manifest) -> Path:
    """A copy of trip-planner whose runner.json has `manifest` merged in."""
    target = tmp_path / "skills" / "trip-planner"
    shutil.copytree(BUNDLED_SKILLS / "trip-planner", target)
    runner = target / "assets" / "runner.json"
    runner.write_text(json.dumps({**json.loads(runner.read_text()), **manifest}))
    return target.parent


def _run_count() -> int:
    from runs.models import Run

    return Run.objects.count()


def test_execution_mode_missing_runs_as_auto(api, haiku, fake_codex):
    """Seed scenario: 未显式提供执行模式 — no execution_mode means auto, with auto's behaviour
    unchanged: the run completes without a marker and has no interactive state."""
    fake_codex.script(haiku_done())
    response = api.post("/v1/jobs", interactive_job("haiku-writer", runtime_options=AUTO_FRESH), format="json")
    assert response.status_code == 200
    assert set(response.json()) == {"request_id", "cache_hit", "status"}
    status = status_of(api, response.json()["request_id"])
    assert status["execution_mode"] == "auto" and status["status"] == "succeeded"
    assert status["pending_interaction_id"] is None and status["interaction_count"] == 0


def test_explicit_interactive_mode_is_accepted_and_orchestrated(api, trip, fake_codex):
    """Seed scenario: 显式请求 interactive 模式 — accepted and orchestrated as interactive: the run
    waits for the user instead of failing on a question."""
    fake_codex.script(ask(), plan_done())
    request_id = start(api, runtime_options=INTERACTIVE)
    status = status_of(api, request_id)
    assert status["execution_mode"] == "interactive" and status["status"] == "waiting_user"


def test_requested_mode_allowed_by_skill_is_accepted(api, haiku, fake_codex):
    """Seed scenario: 请求模式被 Skill 允许 — haiku-writer declares both modes: both are accepted."""
    fake_codex.script(haiku_done())
    for mode in ("auto", "interactive"):
        response = api.post(
            "/v1/jobs",
            interactive_job("haiku-writer", runtime_options={"execution_mode": mode, "no_cache": True}),
            format="json",
        )
        assert response.status_code == 200, response.content
        assert status_of(api, response.json()["request_id"])["execution_mode"] == mode


def test_requested_mode_not_allowed_by_skill_is_400(api, trip, install_skill):
    """Seed scenario: 请求模式不被 Skill 允许 — 400 SKILL_EXECUTION_MODE_UNSUPPORTED and no run:
    trip-planner is interactive only, so auto (explicit or by default) is refused."""
    for options in ({"execution_mode": "auto"}, {}):
        response = api.post("/v1/jobs", interactive_job(runtime_options=options), format="json")
        assert response.status_code == 400, response.content
        assert error_code(response) == "SKILL_EXECUTION_MODE_UNSUPPORTED"
    install_skill("word-count")
    response = api.post(
        "/v1/jobs",
        interactive_job("word-count", input={"document": "a.txt"}, runtime_options=INTERACTIVE),
        format="json",
    )
    assert response.status_code == 400 and error_code(response) == "SKILL_EXECUTION_MODE_UNSUPPORTED"
    assert _run_count() == 0


def test_engine_in_effective_engines_is_accepted(api, install_skill, tmp_path, fake_codex):
    """Seed scenario: 请求引擎在有效集合内 — an engine of effective_engines is accepted."""
    install_skill(
        "trip-planner", root=_trip_planner_with(tmp_path, engines=["codex", "claude"], unsupported_engines=["gemini"])
    )
    fake_codex.script(ask())
    request_id = start(api, engine="codex")
    assert status_of(api, request_id)["status"] == "waiting_user"


def test_engine_listed_in_unsupported_engines_is_400(api, install_skill, tmp_path):
    """Seed scenario: 请求命中显式不支持引擎 — 400 SKILL_ENGINE_UNSUPPORTED, no run created."""
    install_skill("trip-planner", root=_trip_planner_with(tmp_path, unsupported_engines=["gemini"]))
    response = api.post("/v1/jobs", interactive_job(engine="gemini"), format="json")
    assert response.status_code == 400, response.content
    assert error_code(response) == "SKILL_ENGINE_UNSUPPORTED"
    assert _run_count() == 0


def test_engine_outside_declared_engines_is_400(api, install_skill, tmp_path):
    """Seed scenario: 请求引擎不在允许集合 — an engine outside the declared `engines` (so outside
    effective_engines): 400 SKILL_ENGINE_UNSUPPORTED, no run created. (`engines` and
    `unsupported_engines` may not overlap, R-SK2, so the deny-list case is the previous test.)"""
    install_skill("trip-planner", root=_trip_planner_with(tmp_path, engines=["codex", "claude"]))
    for engine in ("gemini", "iflow"):
        response = api.post("/v1/jobs", interactive_job(engine=engine), format="json")
        assert response.status_code == 400, response.content
        assert error_code(response) == "SKILL_ENGINE_UNSUPPORTED"
        assert response.json()["detail"]["effective_engines"] == ["codex", "claude"]
    assert _run_count() == 0


def _run_local_skill_md(request_id: str, skill_id: str) -> str:
    from runs.models import Run

    return (Run.objects.get(pk=request_id).run_dir / ".codex" / "skills" / skill_id / "SKILL.md").read_text()


def _mode_part(text: str) -> str:
    return text[text.index("<!-- skill-runner:mode-patch -->") :]


def test_interactive_patch_does_not_mandate_ask_user_structure(api, haiku, fake_codex):
    """Seed scenario: interactive 模式不强制 ask_user 结构 — the run-local SKILL.md of an interactive
    run says the agent may ask the user, presents the ask_user JSON as optional, and does not make
    it a required product."""
    fake_codex.script(ask())
    request_id = start(api, "haiku-writer", runtime_options=INTERACTIVE)
    patch = _mode_part(_run_local_skill_md(request_id, "haiku-writer"))
    lowered = patch.lower()
    assert "ask the user" in lowered
    assert "optional" in lowered and "ask_user" in patch
    assert "plain words is understood" in lowered  # a question without the JSON is fine
    assert "must use ask_user" not in lowered and "never ask" not in lowered


def test_auto_patch_keeps_automatic_semantics_without_interactive_fields(api, haiku, fake_codex):
    """Seed scenario: auto 模式保持自动执行语义 — the auto run's patch keeps the agent deciding by
    itself and carries none of the interactive payload vocabulary (kind/prompt/options/ui_hints)."""
    fake_codex.script(haiku_done())
    request_id = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    patch = _mode_part(_run_local_skill_md(request_id, "haiku-writer"))
    assert "never ask the user" in patch.lower()
    for word in ("kind", "prompt", "options", "ui_hints", "ask_user"):
        assert word not in patch, word
