"""Upstream's management and observation paths (SPEC R-UP10) and its model names (R-UP9), each
in the shape upstream's `docs/api_reference.md` gives and its example client (`e2e_client/`)
reads, against runs of the fake Codex: a real process writing real files."""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest

from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import create_job, error_code, haiku_step, make_zip, upload, zip_folder

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SUMMARY_KEYS = {
    "id",
    "name",
    "description",
    "version",
    "engines",
    "unsupported_engines",
    "effective_engines",
    "execution_modes",
    "is_builtin",
    "installed_at",
    "health",
    "health_error",
}


@pytest.fixture
def done_run(api, install_skill, fake_codex) -> str:
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    return rid


# ---- management reads ------------------------------------------------------------------------


def test_skills_their_detail_and_schemas(api, install_skill):
    install_skill("haiku-writer")
    [summary] = api.get("/v1/management/skills").json()["skills"]
    assert set(summary) == SUMMARY_KEYS
    assert (summary["id"], summary["health"], summary["execution_modes"]) == (
        "haiku-writer",
        "healthy",
        ["auto", "interactive"],
    )
    detail = api.get("/v1/management/skills/haiku-writer").json()
    assert set(detail) == SUMMARY_KEYS | {"runtime", "schemas", "entrypoints", "files"}
    assert set(detail["schemas"]) == {"input", "parameter", "output"}
    assert {"path": "SKILL.md", "name": "SKILL.md", "is_dir": False, "depth": 0} in detail["files"]
    assert detail["files"][0] == {"path": "assets", "name": "assets", "is_dir": True, "depth": 0}  # folders first
    schemas = api.get("/v1/management/skills/haiku-writer/schemas").json()
    assert schemas["skill_id"] == "haiku-writer" and schemas["input"]["required"] == ["topic"]
    assert {schemas[key]["type"] for key in ("input", "parameter", "output")} == {"object"}
    for path in ("/v1/management/skills/nothing", "/v1/management/skills/nothing/schemas"):
        assert (api.get(path).status_code, error_code(api.get(path))) == (404, "SKILL_NOT_FOUND")


def test_runtime_options_and_engines(api, settings):
    defaults = api.get("/v1/management/runtime-options").json()
    assert defaults == {"service_defaults": {"hard_timeout_seconds": settings.SKILLRUNNER_DEFAULT_HARD_TIMEOUT}}
    engines = api.get("/v1/management/engines").json()["engines"]
    assert [set(entry) for entry in engines] == [{"engine", "cli_version", "models_count"}] * len(engines)
    codex = api.get("/v1/management/engines/codex").json()
    assert codex["models_count"] == len(codex["models"]) > 0
    assert {"id", "provider_id", "model", "supported_effort"} <= set(codex["models"][0])
    assert (codex["upgrade_status"], codex["last_error"], codex["credential_statuses"]) == ({}, None, [])
    assert error_code(api.get("/v1/management/engines/nothing")) == "ENGINE_NOT_FOUND"


def test_management_needs_credentials_and_asks_for_basic(client, db):
    response = client.get("/v1/management/skills")
    assert response.status_code == 401
    assert "Basic" in response["WWW-Authenticate"]


def test_the_runs_list_pages_as_upstream(api, bob_api, install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    mine = [create_job(api)["request_id"] for _ in range(3)]
    create_job(bob_api)
    first = api.get("/v1/management/runs", {"page_size": 2}).json()
    assert {key: first[key] for key in ("page", "page_size", "total", "total_pages")} == {
        "page": 1,
        "page_size": 2,
        "total": 3,
        "total_pages": 2,
    }
    second = api.get("/v1/management/runs", {"page_size": 2, "page": 2}).json()
    listed = [run["request_id"] for run in first["runs"] + second["runs"]]
    assert listed == mine[::-1]  # newest first, the caller's own only
    assert len(api.get("/v1/management/runs", {"limit": 1}).json()["runs"]) == 1  # the older form
    assert api.get("/v1/management/runs", {"page": 9}).json()["runs"] == []
    assert error_code(api.get("/v1/management/runs", {"page": 0})) == "INVALID_PAGE"


# ---- a run's status, files and logs ----------------------------------------------------------


def test_status_carries_upstreams_optional_fields(api, alice, install_skill, fake_codex):
    from accounts.services import issue_token

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    runtime = {"interactive_auto_reply": True, "interactive_reply_timeout_sec": 30}
    rid = create_job(api, runtime_options=runtime)["request_id"]
    status = api.get(f"/v1/jobs/{rid}").json()
    assert {key: status[key] for key in ("conversation_mode", "interactive_auto_reply", "observability_ready")} == {
        "conversation_mode": "session",
        "interactive_auto_reply": True,
        "observability_ready": True,
    }
    assert status["interactive_reply_timeout_sec"] == status["effective_interactive_reply_timeout_sec"] == 30
    assert status["effective_interactive_require_user_reply"] is False  # an auto run waits for nobody
    assert (status["requested_execution_mode"], status["effective_execution_mode"]) == ("auto", "auto")
    assert (status["current_attempt"], status["pending_auth_session_id"]) == (1, None)
    assert status["execution_mode"] == "auto" and "usage" in status  # the service's own fields stay
    # An API key's fast read answers the same.
    _, key = issue_token(alice)
    fast = api.get(f"/v1/jobs/{rid}", HTTP_AUTHORIZATION=f"Token {key}")
    assert fast.json() == status


def test_the_files_of_a_run_and_a_preview(api, done_run, settings, tmp_path):
    from runs.models import Run

    run_dir = Run.objects.get(pk=done_run).run_dir
    secret = tmp_path / "secret.txt"
    secret.write_text("not the run's")
    os.symlink(secret, run_dir / "link.txt")  # what an agent may leave: never followed
    os.symlink(tmp_path, run_dir / "outside")
    answer = api.get(f"/v1/jobs/{done_run}/files").json()
    assert answer["request_id"] == answer["run_id"] == done_run
    paths = {entry["path"]: entry for entry in answer["entries"]}
    assert paths["artifacts"] == {"path": "artifacts", "name": "artifacts", "is_dir": True, "depth": 0}
    assert paths["artifacts/haiku.md"]["depth"] == 1 and not paths["artifacts/haiku.md"]["is_dir"]
    assert "link.txt" not in paths and not any(path.startswith("outside") for path in paths)

    shown = api.get(f"/v1/jobs/{done_run}/file", {"path": "artifacts/haiku.md"}).json()
    assert shown["path"] == "artifacts/haiku.md"
    preview = shown["preview"]
    assert (preview["mode"], preview["detected_format"], preview["size"]) == (
        "text",
        "markdown",
        len(preview["content"]),
    )
    assert preview["content"] == (run_dir / "artifacts" / "haiku.md").read_text()
    for path, code in [("link.txt", 404), ("outside/secret.txt", 404), ("../x", 400), ("/etc/passwd", 400)]:
        assert api.get(f"/v1/jobs/{done_run}/file", {"path": path}).status_code == code, path
    (run_dir / "blob.bin").write_bytes(bytes(range(256)))
    assert api.get(f"/v1/jobs/{done_run}/file", {"path": "blob.bin"}).json()["preview"]["mode"] == "binary"


def test_a_log_range_is_the_bytes_it_names(api, done_run):
    from runs import selectors
    from runs.models import Run

    stdout = selectors.log_path(Run.objects.get(pk=done_run), 1, "stdout").read_bytes()
    assert len(stdout) > 20
    window = api.get(f"/v1/jobs/{done_run}/logs/range", {"stream": "stdout", "byte_from": 5, "byte_to": 20}).json()
    assert window == {"stream": "stdout", "byte_from": 5, "byte_to": 20, "chunk": stdout[5:20].decode()}
    beyond = {"stream": "stdout", "byte_from": 5, "byte_to": 10**9, "attempt": 1}
    assert api.get(f"/v1/jobs/{done_run}/logs/range", beyond).json()["byte_to"] == len(stdout)
    pty = api.get(f"/v1/jobs/{done_run}/logs/range", {"stream": "pty", "byte_to": 10}).json()
    assert pty["chunk"] == ""
    for query, code in [
        ({"stream": "secrets"}, "INVALID_LOG_STREAM"),
        ({"stream": "stdout", "byte_from": 9, "byte_to": 3}, "INVALID_RANGE"),
        ({"stream": "stdout", "byte_from": "-1"}, "INVALID_RANGE"),
        ({"stream": "stdout", "attempt": "0"}, "INVALID_ATTEMPT"),
    ]:
        assert error_code(api.get(f"/v1/jobs/{done_run}/logs/range", query)) == code, query


def test_the_debug_bundle_adds_the_logs(api, done_run):
    response = api.get(f"/v1/jobs/{done_run}/bundle/debug")
    assert response.status_code == 200
    assert 'filename="run_bundle_debug.zip"' in response["Content-Disposition"]
    names = set(zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))).namelist())
    assert {"result/result.json", "artifacts/haiku.md", "logs/attempt-1.stdout.txt"} <= names
    plain = zipfile.ZipFile(io.BytesIO(b"".join(api.get(f"/v1/jobs/{done_run}/bundle").streaming_content)))
    assert not any(name.startswith("logs/") for name in plain.namelist())


def test_the_debug_bundle_waits_for_the_end(api, install_skill, manual_dispatch):
    install_skill("haiku-writer")
    rid = create_job(api)["request_id"]
    assert error_code(api.get(f"/v1/jobs/{rid}/bundle/debug")) == "RESULT_NOT_READY"


def test_event_history_without_parameters_is_upstreams(api, done_run):
    fcmp = api.get(f"/v1/jobs/{done_run}/events/history").json()
    assert set(fcmp) == {"request_id", "count", "events", "cursor_floor", "cursor_ceiling", "source"}
    assert fcmp["events"][0]["protocol_version"] == "fcmp/1.0"
    assert fcmp["events"][-1]["type"] == "conversation.state.changed"
    own = api.get(f"/v1/jobs/{done_run}/events/history", {"after_seq": 0}).json()
    assert set(own) == {"request_id", "events", "last_seq"}


def test_engine_log_in_is_not_supported_here_but_the_run_is_there(api, bob_api, done_run):
    session = api.get(f"/v1/jobs/{done_run}/auth/session")
    assert session.status_code == 200
    assert session.json()["auth_session"] is None and session.json()["waiting_auth"] is False
    imported = api.post(
        f"/v1/jobs/{done_run}/interaction/auth/import", {"files": upload("auth.json", b"{}")}, format="multipart"
    )
    assert (imported.status_code, error_code(imported)) == (422, "AUTH_IMPORT_UNSUPPORTED")
    assert "not supported" in imported.json()["detail"]["message"]
    assert bob_api.get(f"/v1/jobs/{done_run}/auth/session").status_code == 404  # someone else's run


# ---- model names (R-UP9) ---------------------------------------------------------------------


def test_model_at_effort_is_split(api, install_skill, fake_codex):
    from runs.models import Run

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api, model="gpt-5.5@minimal")["request_id"]
    run = Run.objects.get(pk=rid)
    assert run.model == "gpt-5.5"
    assert run.runtime_options["engine_config"]["settings"]["model_reasoning_effort"] == "minimal"
    [invocation] = fake_codex.invocations()
    argv = invocation["argv"]
    assert argv[argv.index("-m") + 1] == "gpt-5.5"
    refused = api.post("/v1/jobs", {"skill_id": "haiku-writer", "model": "gpt-5.5@ludicrous"}, format="json")
    assert error_code(refused) == "EFFORT_UNSUPPORTED"


def test_a_model_the_catalogue_does_not_list_is_refused_unless_allowed(api, install_skill, fake_codex, settings):
    from runs.models import Run

    install_skill("haiku-writer")
    body = {"skill_id": "haiku-writer", "input": {"topic": "sea"}, "model": "gpt-9-imaginary"}
    refused = api.post("/v1/jobs", body, format="json")
    assert (refused.status_code, error_code(refused)) == (400, "MODEL_UNSUPPORTED")
    detail = refused.json()["detail"]
    assert "gpt-9-imaginary" in detail["message"] and "gpt-5.5" in detail["message"]
    assert detail["model"] == "gpt-9-imaginary" and "gpt-5.5" in detail["allowed_models"]
    temp = api.post("/v1/jobs", {"skill_source": "temp_upload", "model": "gpt-9-imaginary"}, format="json")
    assert error_code(temp) == "MODEL_UNSUPPORTED"  # checked before the skill comes
    assert not Run.objects.exists()
    settings.SKILLRUNNER_ALLOW_ANY_MODEL = True
    fake_codex.script(haiku_step())
    assert api.post("/v1/jobs", body, format="json").status_code == 200


def test_a_temporary_package_needs_no_version(api, fake_codex, tmp_path):
    """R-UP8: upstream validates a package for one run without runner.json `version`."""
    folder = BUNDLED_SKILLS / "word-count"
    runner = json.loads((folder / "assets" / "runner.json").read_text())
    runner.pop("version")
    package = zip_folder(folder, extra={"word-count/assets/runner.json": json.dumps(runner)})
    rid = api.post("/v1/jobs", {"skill_source": "temp_upload", "input": {}}, format="json").json()["request_id"]
    fake_codex.script({"message": json.dumps({"lines": 1, "words": 2})})
    parts = {"skill_package": upload("skill.zip", package), "file": upload("in.zip", make_zip({"document": "a b\n"}))}
    response = api.post(f"/v1/jobs/{rid}/upload", parts, format="multipart")
    assert response.status_code == 200, response.content
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
