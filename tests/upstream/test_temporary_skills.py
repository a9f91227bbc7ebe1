"""Temporary skill runs (R-UP4): the skill comes with the run's upload, for that run only."""

from __future__ import annotations

import json

import pytest
from django.conf import settings as django_settings

from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import HAIKU_DATA, clone_skill, error_code, haiku_step, make_zip, tree_state, upload, zip_folder

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = "one two three\nfour five\n"


def _create(client, **body):
    body = {"skill_source": "temp_upload", "engine": "codex", "input": {"topic": "sea"}, **body}
    response = client.post("/v1/jobs", body, format="json")
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["status"] is None  # waits for its upload, as upstream's clients expect
    return answer["request_id"]


def _upload(client, rid, package: bytes | None = None, inputs: bytes | None = None):
    parts = {}
    if package is not None:
        parts["skill_package"] = upload("skill_package.zip", package)
    if inputs is not None:
        parts["file"] = upload("inputs.zip", inputs)
    return client.post(f"/v1/jobs/{rid}/upload", parts, format="multipart")


def _private_haiku(tmp_path) -> bytes:
    return zip_folder(clone_skill(BUNDLED_SKILLS / "haiku-writer", tmp_path, skill_id="haiku-private"))


def _temporary_snapshots() -> list[str]:
    root = django_settings.DATA_DIR / "skill-snapshots" / ".temporary"
    return sorted(path.name for path in root.iterdir()) if root.is_dir() else []


def test_a_temporary_skill_runs_once_and_is_seen_by_nobody(api, bob_api, install_skill, fake_codex, tmp_path):
    from skills.models import Skill

    install_skill("trip-planner")
    fake_codex.script(haiku_step())
    rid = _create(api)
    waiting = api.get(f"/v1/jobs/{rid}").json()
    assert (waiting["status"], waiting["awaiting_upload"], waiting["skill_id"]) == ("queued", True, None)
    assert fake_codex.invocations() == []

    response = _upload(api, rid, _private_haiku(tmp_path))
    assert response.status_code == 200, response.content
    assert response.json()["extracted_files"] == []
    status = api.get(f"/v1/jobs/{rid}").json()
    assert (status["status"], status["skill_id"], status["skill_version"]) == ("succeeded", "haiku-private", "1.0.0")
    assert api.get(f"/v1/jobs/{rid}/result").json()["result"]["data"] == HAIKU_DATA

    # Never installed, listed or runnable by id, by anyone; its files went with the run.
    assert [skill["id"] for skill in api.get("/v1/skills").json()] == ["trip-planner"]
    assert api.get("/v1/skills/haiku-private").status_code == 404
    refused = bob_api.post("/v1/jobs", {"skill_id": "haiku-private", "input": {"topic": "sea"}}, format="json")
    assert (refused.status_code, error_code(refused)) == (404, "SKILL_NOT_FOUND")
    assert bob_api.get(f"/v1/jobs/{rid}").status_code == 404
    assert _temporary_snapshots() == []
    assert Skill.objects.get(skill_id="haiku-private").temporary  # its record stays, for the audit


def test_a_temporary_skill_may_share_an_installed_skills_id(api, install_skill, fake_codex):
    installed = install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = _create(api)
    assert _upload(api, rid, zip_folder(BUNDLED_SKILLS / "haiku-writer")).status_code == 200
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    [listed] = [skill for skill in api.get("/v1/skills").json() if skill["id"] == "haiku-writer"]
    assert listed["version"] == installed.version
    from runs.models import Run

    assert Run.objects.get(pk=rid).skill_version_id != installed.pk


def test_package_and_inputs_in_one_request(api, fake_codex):
    fake_codex.script({"message": json.dumps({"lines": 2, "words": 5})})
    rid = _create(api, input={})
    response = _upload(api, rid, zip_folder(BUNDLED_SKILLS / "word-count"), make_zip({"document": DOCUMENT}))
    assert response.status_code == 200, response.content
    assert response.json()["extracted_files"] == ["document"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"


def test_package_first_then_inputs(api, fake_codex):
    fake_codex.script({"message": json.dumps({"lines": 2, "words": 5})})
    rid = _create(api, input={})
    assert _upload(api, rid, zip_folder(BUNDLED_SKILLS / "word-count")).status_code == 200
    waiting = api.get(f"/v1/jobs/{rid}").json()
    assert (waiting["status"], waiting["awaiting_upload"], waiting["skill_id"]) == ("queued", True, "word-count")
    assert _upload(api, rid, inputs=make_zip({"document": DOCUMENT})).status_code == 200
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"


def test_missing_input_files_fail_the_run_at_once(api, fake_codex):
    """R-UP8: known only once the upload is there, so the upload is taken (200, as upstream) and
    the run ends failed with the code the refusal has, instead of waiting for its timeout."""
    rid = _create(api, input={})
    response = _upload(api, rid, zip_folder(BUNDLED_SKILLS / "word-count"), make_zip({"other.txt": "x"}))
    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["extracted_files"]) == ("failed", [])
    run = api.get(f"/v1/jobs/{rid}").json()
    assert (run["status"], run["skill_id"], run["error"]["code"]) == ("failed", "word-count", "INPUT_FILE_MISSING")
    assert "document" in run["error"]["message"]
    assert fake_codex.invocations() == []
    assert _temporary_snapshots() == []  # removed with the run that ended


HOSTILE = {
    "traversal": ({"haiku/SKILL.md": "x", "../evil.txt": "x"}, {}),
    "absolute": ({"/tmp/evil.txt": "x"}, {}),
    "link": ({"haiku/SKILL.md": "---\nname: haiku\n---\n"}, {"haiku/assets/runner.json": "/etc/passwd"}),
    "two folders": ({"a/SKILL.md": "x", "b/SKILL.md": "x"}, {}),
    "not a zip": (None, {}),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_package_is_refused_with_nothing_written(api, fake_codex, case):
    from skills.models import Skill, SkillVersion

    entries, links = HOSTILE[case]
    content = b"PK\x03\x04 not really" if entries is None else make_zip(entries, symlinks=links)
    rid = _create(api)
    data = django_settings.DATA_DIR
    before = tree_state(data / "skill-snapshots"), tree_state(data / "tmp")
    response = _upload(api, rid, content)
    assert response.status_code == 400, response.content
    assert error_code(response)
    assert (tree_state(data / "skill-snapshots"), tree_state(data / "tmp")) == before
    assert not SkillVersion.objects.exists() and not Skill.objects.exists()
    assert not (data / "evil.txt").exists() and not (data.parent / "evil.txt").exists()
    run = api.get(f"/v1/jobs/{rid}").json()  # refused, so it waits no more (R-UP8)
    assert (run["status"], run["error"]["code"]) == ("failed", error_code(response))


def test_a_package_bringing_engine_control_files_is_refused(api, tmp_path):
    """Validated exactly like an install (R-SK2): a skill may not configure the engine that runs it."""
    skill = clone_skill(BUNDLED_SKILLS / "haiku-writer", tmp_path)
    rid = _create(api)
    response = _upload(api, rid, zip_folder(skill, extra={"haiku-writer/.codex/config.toml": "model = 'x'"}))
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_UNSAFE_ENTRY"
    assert _temporary_snapshots() == []
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "failed"


def test_input_the_skill_refuses_fails_the_run_at_once(api, fake_codex, tmp_path):
    """What depends on the skill is checked when it arrives: an input its schema refuses is
    taken with the upload and ends the run failed at once (R-UP8), with creation's code."""
    rid = _create(api, input={"topic": 7})
    response = _upload(api, rid, _private_haiku(tmp_path))
    assert (response.status_code, response.json()["status"]) == (200, "failed")
    run = api.get(f"/v1/jobs/{rid}").json()
    assert (run["status"], run["error"]["code"], run["skill_id"]) == (
        "failed",
        "INPUT_VALIDATION_FAILED",
        "haiku-private",
    )
    assert "input.topic" in run["error"]["message"]
    assert fake_codex.invocations() == []
    assert _temporary_snapshots() == []


def test_upload_rules(api, install_skill, fake_codex, tmp_path):
    rid = _create(api)
    missing = _upload(api, rid, inputs=make_zip({"document": DOCUMENT}))
    assert (missing.status_code, error_code(missing)) == (400, "SKILL_PACKAGE_MISSING")
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    done = api.post("/v1/jobs", {"skill_id": "haiku-writer", "input": {"topic": "sea"}}, format="json").json()
    again = _upload(api, done["request_id"], _private_haiku(tmp_path))
    assert (again.status_code, error_code(again)) == (409, "SKILL_PACKAGE_NOT_EXPECTED")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"skill_source": "temp_upload", "skill_id": "haiku-writer"}, "VALIDATION_ERROR"),
        ({"skill_source": "installed"}, "VALIDATION_ERROR"),
        ({"skill_source": "somewhere"}, "VALIDATION_ERROR"),
        ({"skill_source": "temp_upload", "engine": "nonsense"}, "ENGINE_UNKNOWN"),
        ({"skill_source": "temp_upload", "provider_id": "anthropic"}, "PROVIDER_UNSUPPORTED"),
        ({"skill_source": "temp_upload", "effort": "ludicrous"}, "EFFORT_UNSUPPORTED"),
        ({"skill_source": "temp_upload", "engine": "gemini", "effort": "high"}, "EFFORT_UNSUPPORTED"),
        ({"skill_source": "temp_upload", "runtime_options": {"workflow_mcp": {}}}, "RUNTIME_OPTION_INVALID"),
        ({"skill_source": "temp_upload", "runtime_options": {"env": "A=1"}}, "RUNTIME_OPTION_INVALID"),
        ({"skill_source": "temp_upload", "runtime_options": {"hard_timeout_seconds": 0}}, "RUNTIME_OPTION_INVALID"),
    ],
)
def test_create_checks_what_it_can_before_the_skill(api, body, code):
    from runs.models import Run

    response = api.post("/v1/jobs", body, format="json")
    assert response.status_code == 400, response.content
    assert error_code(response) == code
    assert not Run.objects.exists()


def test_upstream_create_fields(api, install_skill, fake_codex):
    """provider_id and effort (codex: model_reasoning_effort); upstream's option keys that do
    nothing here are accepted with a warning that says so."""
    from runs.models import Run

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    response = api.post(
        "/v1/jobs",
        {
            "skill_id": "haiku-writer",
            "input": {"topic": "sea"},
            "provider_id": "openai",
            "effort": "High",
            "runtime_options": {
                "no_cache": True,
                "collect_skill_run_feedback": True,
                "preamble_prompt": "Be brief.",
                "env": {"LANG": "C"},
                "workspace": {"mode": "reuse"},
            },
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    run = Run.objects.get(pk=response.json()["request_id"])
    assert run.runtime_options["engine_config"]["settings"] == {"model_reasoning_effort": "high"}
    assert sorted(warning["message"] for warning in run.warnings) == [
        f"runtime_options.{key} has no effect on this service"
        for key in ("collect_skill_run_feedback", "env", "preamble_prompt", "workspace")
    ]
    config = (django_settings.DATA_DIR / "engine-homes" / "codex").glob("*/config.toml")
    assert any('model_reasoning_effort = "high"' in path.read_text() for path in config)


def test_temporary_runs_count_toward_the_users_queue(api, settings):
    settings.SKILLRUNNER_USER_MAX_QUEUED = 1
    _create(api)
    response = api.post("/v1/jobs", {"skill_source": "temp_upload"}, format="json")
    assert (response.status_code, error_code(response)) == (429, "QUEUE_FULL")


def test_a_temporary_run_never_uploaded_expires_or_cancels(api):
    from runs import services
    from runs.models import Run

    expiring, canceled = _create(api), _create(api)
    assert services.expire_upload(expiring)
    assert Run.objects.get(pk=expiring).error["code"] == "UPLOAD_TIMEOUT"
    assert api.post(f"/v1/jobs/{canceled}/cancel").json()["accepted"] is True
    assert api.get(f"/v1/jobs/{canceled}").json()["status"] == "canceled"
    assert _upload(api, canceled, zip_folder(BUNDLED_SKILLS / "haiku-writer")).status_code == 409


def test_pages_and_admin_show_a_run_still_waiting_for_its_skill(api, alice, admin_user):
    from django.test import Client

    rid = _create(api)
    page = Client()
    page.force_login(alice)
    assert page.get("/").status_code == 200
    detail = page.get(f"/runs/{rid}/")
    assert detail.status_code == 200
    admin = Client()
    admin.force_login(admin_user)
    assert admin.get("/admin/runs/run/").status_code == 200
    assert admin.get(f"/admin/runs/run/{rid}/change/").status_code == 200
