"""Packages in today's format through the API with the scripted engine (tests/support/fake_codex.py):
artifacts by value and by manifest, optional null artifacts (R-OU1), a runtime dependency (R-SK7),
a prompt template (R-SK8) and the skill's engine defaults and runtime options (R-SK9).

The package is tests/support/skills/field-notes; turns run inline, so a run is over when
POST /v1/jobs returns.
"""

from __future__ import annotations

import io
import json
import shutil
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import TEST_SKILLS
from tests.support.jobs import create_job

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = "# Field notes\n\nThe tide came in twice.\n"


def _answer(**fields) -> str:
    return json.dumps(
        {"summary": "Two tides a day.", "report": "notes/report.md", "chart": None, "sources": None} | fields
    )


def _result(api, request_id: str) -> dict:
    response = api.get(f"/v1/jobs/{request_id}/result")
    assert response.status_code == 200, response.content
    return response.json()["result"]


def _bundle(api, request_id: str) -> zipfile.ZipFile:
    response = api.get(f"/v1/jobs/{request_id}/bundle")
    assert response.status_code == 200
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def _package(tmp_path: Path, **runner_changes) -> Path:
    """A copy of field-notes with runner.json changed, installed from there."""
    root = tmp_path / "packages"
    target = root / "field-notes"
    shutil.copytree(TEST_SKILLS / "field-notes", target)
    runner = json.loads((target / "assets" / "runner.json").read_text())
    runner.update(runner_changes)
    (target / "assets" / "runner.json").write_text(json.dumps(runner))
    return root


@pytest.fixture
def field_notes(install_skill):
    return install_skill("field-notes")


def test_files_named_by_value_and_by_manifest_are_collected_everywhere(api, field_notes, fake_codex):
    """R-OU1: relative and absolute paths anywhere in the run; the manifest's files and the
    manifest itself (values rewritten) too. Result, GET …/artifacts, one file and the bundle agree."""
    fake_codex.script(
        {
            "files": {
                "notes/report.md": REPORT,
                "work/chart.svg": "<svg/>",
                "figures/a.txt": "figure A",
                "figures/b.txt": "figure B",
                "sources.json": json.dumps({"first": "figures/a.txt", "second": "{cwd}/figures/b.txt"}),
            },
            "message": _answer(chart="{cwd}/work/chart.svg", sources="sources.json"),
        }
    )
    request_id = create_job(api, "field-notes", input={"topic": "tides"})["request_id"]
    result = _result(api, request_id)
    assert result["status"] == "success", result
    assert result["data"] == {
        "summary": "Two tides a day.",
        "report": "artifacts/report.md",
        "chart": "artifacts/chart.svg",
        "sources": "artifacts/sources.json",
    }
    expected = sorted(
        ["artifacts/report.md", "artifacts/chart.svg", "artifacts/a.txt", "artifacts/b.txt", "artifacts/sources.json"]
    )
    assert result["artifacts"] == expected
    assert api.get(f"/v1/jobs/{request_id}/artifacts").json()["artifacts"] == expected
    one = api.get(f"/v1/jobs/{request_id}/artifacts/artifacts/report.md")
    assert one.status_code == 200 and b"".join(one.streaming_content).decode() == REPORT
    bundle = _bundle(api, request_id)
    assert set(expected) <= set(bundle.namelist())
    assert bundle.read("artifacts/report.md").decode() == REPORT
    assert json.loads(bundle.read("artifacts/sources.json")) == {
        "first": "artifacts/a.txt",
        "second": "artifacts/b.txt",
    }
    assert json.loads(bundle.read("result/result.json"))["data"]["report"] == "artifacts/report.md"


def test_optional_artifacts_may_be_null(api, field_notes, fake_codex):
    fake_codex.script({"files": {"notes/report.md": REPORT}, "message": _answer()})
    request_id = create_job(api, "field-notes", input={"topic": "tides"})["request_id"]
    result = _result(api, request_id)
    assert result["status"] == "success", result
    assert result["data"]["chart"] is None and result["data"]["sources"] is None
    assert result["artifacts"] == ["artifacts/report.md"]


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (_answer(report="notes/nowhere.md"), ["report", "notes/nowhere.md"]),
        (_answer(report="/etc/hostname"), ["report", "/etc/hostname"]),
        (_answer(sources="sources.json"), ["sources", "figures/gone.txt"]),
    ],
    ids=["missing", "outside-the-run", "manifest-entry"],
)
def test_a_required_artifact_that_is_missing_fails_the_run_naming_property_and_path(
    api, tmp_path, install_skill, fake_codex, answer, named
):
    """R-OU1: ARTIFACT_MISSING names the field and the path (a manifest entry of a required manifest too)."""
    output = json.loads((TEST_SKILLS / "field-notes" / "assets" / "output.schema.json").read_text())
    root = _package(tmp_path, runtime={})
    output["required"] = ["summary", "report", "sources"] if "sources.json" in answer else output["required"]
    (root / "field-notes" / "assets" / "output.schema.json").write_text(json.dumps(output))
    install_skill("field-notes", root=root)
    files = {"notes/report.md": REPORT, "sources.json": json.dumps({"gone": "figures/gone.txt"})}
    fake_codex.script({"files": files, "message": answer})
    request_id = create_job(api, "field-notes", input={"topic": "tides"}, runtime_options={"max_repair_rounds": 0})[
        "request_id"
    ]
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert status["status"] == "failed", status
    assert status["error"]["code"] == "ARTIFACT_MISSING"
    for fragment in named:
        assert fragment in status["error"]["message"]
    assert _result(api, request_id)["data"] is None


def test_the_prompt_template_replaces_the_generic_body(api, field_notes, fake_codex):
    """R-SK8: the skill's own first-turn prompt, rendered; the patched SKILL.md and run dir follow."""
    fake_codex.script({"files": {"notes/report.md": REPORT}, "message": _answer()})
    request_id = create_job(api, "field-notes", input={"topic": "tides"}, parameter={"audience": "curious"})[
        "request_id"
    ]
    prompt = fake_codex.invocations()[0]["prompt"]
    assert prompt.startswith("Use the skill field-notes to write field notes about tides for a curious reader.\n")
    assert "Inputs:" not in prompt
    assert "/.codex/skills/field-notes/SKILL.md" in prompt
    assert "Run directory (your working directory): " in prompt
    logged = api.get(f"/v1/jobs/{request_id}/logs").json()["prompt"]
    assert "field notes about tides" in logged


@pytest.mark.parametrize("template", ["About {{ input.no_such_input }}", "{% for x in %}", 42])
def test_an_unusable_template_fails_the_run_before_the_engine_starts(
    api, tmp_path, install_skill, fake_codex, template
):
    """R-SK8: undefined variables and template errors: SKILL_PROMPT_INVALID, no half-rendered prompt."""
    install_skill("field-notes", root=_package(tmp_path, entrypoint={"prompts": {"codex": template}}, runtime={}))
    fake_codex.script({"files": {"notes/report.md": REPORT}, "message": _answer()})
    request_id = create_job(api, "field-notes", input={"topic": "tides"})["request_id"]
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert status["status"] == "failed"
    assert status["error"]["code"] == "SKILL_PROMPT_INVALID"
    assert "prompt template" in status["error"]["message"]
    assert fake_codex.invocations() == []


def test_engine_defaults_sit_beneath_the_run_and_above_the_service(api, field_notes, fake_codex, settings):
    """R-SK9: the skill's model and reasoning effort apply; sandbox, approvals and providers are
    ignored with a warning; runtime.default_options supplies the hard timeout."""
    from runs.models import Run

    fake_codex.script({"files": {"notes/report.md": REPORT}, "message": _answer()})
    request_id = create_job(api, "field-notes", input={"topic": "tides"})["request_id"]
    argv = fake_codex.invocations()[0]["argv"]
    assert argv[argv.index("-m") + 1] == "gpt-5.1-codex-mini"
    config = tomllib.loads((settings.DATA_DIR / "engine-homes" / "codex" / request_id / "config.toml").read_text())
    assert config["model_reasoning_effort"] == "high"
    assert "sandbox_mode" not in config and "approval_policy" not in config
    assert "elsewhere" not in config.get("model_providers", {})
    status = api.get(f"/v1/jobs/{request_id}").json()
    ignored = [w for w in status["warnings"] if w["code"] == "SKILL_ENGINE_CONFIG_IGNORED"]
    assert len(ignored) == 1 and "sandbox_mode" in ignored[0]["message"]
    options = Run.objects.get(pk=request_id).runtime_options
    assert options["hard_timeout_seconds"] == 900
    assert options["engine_config"]["settings"]["model_reasoning_effort"] == "high"

    create_job(api, "field-notes", input={"topic": "tides"}, model="gpt-5.5")  # the run's own choice wins
    argv = fake_codex.invocations()[-1]["argv"]
    assert argv[argv.index("-m") + 1] == "gpt-5.5"


def test_effective_options_are_visible_in_the_admin(staff_api, field_notes, fake_codex):
    from django.test import Client

    fake_codex.script({"files": {"notes/report.md": REPORT}, "message": _answer()})
    request_id = create_job(staff_api, "field-notes", input={"topic": "tides"})["request_id"]
    browser = Client()
    browser.force_login(staff_api.user)
    page = browser.get(f"/admin/runs/run/{request_id}/change/").content.decode()
    assert "model_reasoning_effort" in page and "hard_timeout_seconds" in page


def test_a_runtime_dependency_is_first_on_path(api, field_notes, fake_codex, settings):
    """R-SK7: the skill's script imports its dependency from the environment built for it."""
    fake_codex.script(
        {
            "shell": "mkdir -p notes && python -c 'import pyjokes, sys; print(sys.prefix)' > notes/report.md",
            "message": _answer(),
        }
    )
    request_id = create_job(api, "field-notes", input={"topic": "tides"})["request_id"]
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert status["status"] == "succeeded", status
    assert not [w for w in status["warnings"] if w["code"] == "RUNTIME_DEPENDENCIES_INJECTION_FAILED"]
    one = api.get(f"/v1/jobs/{request_id}/artifacts/artifacts/report.md")
    prefix = Path(b"".join(one.streaming_content).decode().strip())
    assert prefix.parent == settings.DATA_DIR / "skill-envs"


def test_the_dependency_environment_is_read_only_to_the_agent(api, field_notes, fake_codex, settings):
    """R-SK7 with R-SB2: the environment built for the skill is shared by its runs, so the agent
    may use it but never change it (a changed one would reach the next run of any user)."""
    probe = "import pyjokes, pathlib, sys; pathlib.Path(sys.prefix, 'pwned').write_text('x')"
    fake_codex.script(
        {
            "shell": f'mkdir -p notes && (python -c "{probe}" 2>&1 || true) > notes/report.md',
            "message": _answer(),
        }
    )
    request_id = create_job(api, "field-notes", input={"topic": "tides"})["request_id"]
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert status["status"] == "succeeded", status
    report = api.get(f"/v1/jobs/{request_id}/artifacts/artifacts/report.md")
    assert "Read-only file system" in b"".join(report.streaming_content).decode()
    assert not list((settings.DATA_DIR / "skill-envs").glob("*/pwned"))


def test_a_dependency_that_cannot_be_built_is_a_warning_and_the_turn_still_runs(
    api, tmp_path, install_skill, fake_codex
):
    """R-SK7: RUNTIME_DEPENDENCIES_INJECTION_FAILED in the run's warnings; the run goes on."""
    missing = "skillrunner-no-such-package-7f3c"
    install_skill("field-notes", root=_package(tmp_path, runtime={"dependencies": [missing]}))
    fake_codex.script({"files": {"notes/report.md": REPORT}, "message": _answer()})
    request_id = create_job(api, "field-notes", input={"topic": "tides"})["request_id"]
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert status["status"] == "succeeded", status
    failed = [w for w in status["warnings"] if w["code"] == "RUNTIME_DEPENDENCIES_INJECTION_FAILED"]
    assert len(failed) == 1 and missing in failed[0]["message"]
    assert len(fake_codex.invocations()) == 1
