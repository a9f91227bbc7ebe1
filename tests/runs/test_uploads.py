"""Input files (upstream §1.5, R-AD5, R-SK5, SPEC §8): a skill with required file inputs gets
`status: null` from POST /v1/jobs, and runs once POST /v1/jobs/{id}/upload brought its files."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.jobs import detail, error_code, make_zip, tree_state, upload

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = "one two three\nfour five\n"


@pytest.fixture(autouse=True)
def word_count(install_skill):
    install_skill("word-count")


def _create(api) -> str:
    response = api.post("/v1/jobs", {"skill_id": "word-count", "engine": "codex", "input": {}}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] is None  # pending upload, as upstream clients expect
    return body["request_id"]


def _upload(api, rid: str, entries, **kwargs):
    content = entries if isinstance(entries, bytes) else make_zip(entries, **kwargs)
    return api.post(f"/v1/jobs/{rid}/upload", {"file": upload("inputs.zip", content)}, format="multipart")


def test_run_waits_for_upload_then_executes(api, fake_codex):
    from runs.models import Run

    fake_codex.script({"message": json.dumps({"lines": 2, "words": 5})})
    rid = _create(api)
    run_dir = Run.objects.get(pk=rid).run_dir
    assert run_dir.is_dir() and not (run_dir / "uploads").exists()  # it comes with the files
    status = api.get(f"/v1/jobs/{rid}").json()
    assert status["status"] == "queued"
    assert fake_codex.invocations() == []  # nothing runs before the files are there

    response = _upload(api, rid, {"document": DOCUMENT})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["request_id"] == rid
    assert body["extracted_files"] == ["document"]

    status = api.get(f"/v1/jobs/{rid}").json()
    assert status["status"] == "succeeded", status
    assert api.get(f"/v1/jobs/{rid}/result").json()["result"]["data"] == {"lines": 2, "words": 5}
    run = Run.objects.get(pk=rid)
    uploaded = run.run_dir / "uploads" / "document"
    assert uploaded.read_text() == DOCUMENT
    [invocation] = fake_codex.invocations()
    assert str(uploaded.resolve()) in invocation["prompt"]  # R-EN6: file inputs by absolute path


def test_missing_required_file_fails_the_run_at_once(api, fake_codex):
    """R-UP8: only the upload shows a required file missing, so the upload is taken (200, as
    upstream's clients expect) and the run ends failed with INPUT_FILE_MISSING, not left queued."""
    from runs.models import Run

    rid = _create(api)
    response = _upload(api, rid, {"something-else.txt": DOCUMENT})
    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["extracted_files"]) == ("failed", [])
    run = Run.objects.get(pk=rid)
    assert (run.status, run.error["code"]) == ("failed", "INPUT_FILE_MISSING")
    assert "document" in run.error["message"]
    assert run.result["error"]["code"] == "INPUT_FILE_MISSING"
    assert not (run.run_dir / "uploads" / "something-else.txt").exists()
    assert fake_codex.invocations() == []
    # It waits for nothing more.
    assert error_code(_upload(api, rid, {"document": DOCUMENT})) == "UPLOAD_NOT_EXPECTED"


def test_file_given_by_relative_path_in_input(api, fake_codex):
    """HEAD-style clients name the file in `input` as a path relative to uploads/."""
    fake_codex.script({"message": json.dumps({"lines": 1, "words": 1})})
    response = api.post(
        "/v1/jobs",
        {"skill_id": "word-count", "engine": "codex", "input": {"document": "docs/readme.txt"}},
        format="json",
    )
    assert response.status_code == 200, response.content
    rid = response.json()["request_id"]
    assert response.json()["status"] is None
    assert _upload(api, rid, {"docs/readme.txt": "hello\n"}).status_code == 200
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    assert "docs/readme.txt" in fake_codex.invocations()[0]["prompt"]


@pytest.mark.parametrize(
    "entries,links,named",
    [
        ({"document": DOCUMENT, "../escape.txt": "x"}, None, "../escape.txt"),
        ({"document": DOCUMENT, "/tmp/skillrunner-upload-abs.txt": "x"}, None, "/tmp/skillrunner-upload-abs.txt"),
        ({"document": DOCUMENT}, {"link": "/etc/passwd"}, "link"),
        ({"document": DOCUMENT, ".codex/config.toml": "model='x'"}, None, ".codex/config.toml"),
        ({"document": DOCUMENT, ".env": "A=1"}, None, ".env"),
        ({"document": DOCUMENT, ".mcp.json": "{}"}, None, ".mcp.json"),
    ],
    ids=["parent", "absolute", "symlink", "codex-config", "env", "mcp"],
)
def test_hostile_zip_is_refused_and_nothing_is_written(api, fake_codex, settings, entries, links, named):
    from runs.models import Run

    rid = _create(api)
    run_dir = Run.objects.get(pk=rid).run_dir
    before = tree_state(settings.DATA_DIR)
    response = _upload(api, rid, entries, symlinks=links)
    assert response.status_code == 400
    body = detail(response)
    assert body["code"] == "ARCHIVE_UNSAFE_ENTRY"
    assert named in body["message"]
    assert tree_state(settings.DATA_DIR) == before
    assert not os.path.exists("/tmp/skillrunner-upload-abs.txt")
    assert not (run_dir.parent / "escape.txt").exists()
    assert not (run_dir / "escape.txt").exists()
    run = Run.objects.get(pk=rid)  # refused, so it waits no more (R-UP8)
    assert (run.status, run.error["code"]) == ("failed", "ARCHIVE_UNSAFE_ENTRY")
    assert fake_codex.invocations() == []


def test_not_a_zip_is_refused(api):
    rid = _create(api)
    response = _upload(api, rid, b"plain text, not a zip")
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_INVALID"


def test_zip_bomb_is_refused(api, settings):
    rid = _create(api)
    before = tree_state(settings.DATA_DIR)
    response = _upload(api, rid, {"document": b"\0" * (8 * 1024 * 1024)})
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_RATIO_EXCEEDED"
    assert tree_state(settings.DATA_DIR) == before


def test_too_many_members_is_refused(api, settings):
    settings.SKILLRUNNER_ZIP_MAX_MEMBERS = 3
    rid = _create(api)
    response = _upload(api, rid, {"document": DOCUMENT, **{f"extra{i}": "x" for i in range(5)}})
    assert response.status_code == 400
    assert error_code(response) == "ARCHIVE_TOO_MANY_MEMBERS"


def test_upload_over_the_size_limit_is_413(api, settings):
    """SPEC §8: upload too large → 413."""
    settings.SKILLRUNNER_MAX_UPLOAD_BYTES = 16 * 1024
    rid = _create(api)
    response = _upload(api, rid, {"document": os.urandom(64 * 1024)})
    assert response.status_code == 413, response.content
    assert error_code(response) == "REQUEST_TOO_LARGE"
    run = api.get(f"/v1/jobs/{rid}").json()  # refused, so it waits no more (R-UP8)
    assert (run["status"], run["error"]["code"]) == ("failed", "REQUEST_TOO_LARGE")


def test_missing_file_field(api):
    rid = _create(api)
    response = api.post(f"/v1/jobs/{rid}/upload", {"not_file": "x"}, format="multipart")
    assert response.status_code == 400
    assert error_code(response) == "UPLOAD_FILE_MISSING"
    assert api.get(f"/v1/jobs/{rid}").json()["error"]["code"] == "UPLOAD_FILE_MISSING"


def test_second_upload_is_409(api, fake_codex):
    fake_codex.script({"message": json.dumps({"lines": 2, "words": 5})})
    rid = _create(api)
    assert _upload(api, rid, {"document": DOCUMENT}).status_code == 200
    again = _upload(api, rid, {"document": "replaced"})
    assert again.status_code == 409
    from runs.models import Run

    assert (Run.objects.get(pk=rid).run_dir / "uploads" / "document").read_text() == DOCUMENT


def test_upload_to_a_run_without_file_inputs_is_409(api, install_skill, fake_codex):
    from tests.support.jobs import create_job, haiku_step

    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    response = _upload(api, rid, {"document": DOCUMENT})
    assert response.status_code == 409
    assert error_code(response) == "UPLOAD_NOT_EXPECTED"


def test_upstream_layout_file_input_waits_for_upload(api, install_skill, fake_codex):
    """line-counter declares a required file input without x-input-source (upstream default: file)."""
    install_skill("line-counter")
    response = api.post("/v1/jobs", {"skill_id": "line-counter", "engine": "codex", "input": {}}, format="json")
    assert response.status_code == 200, response.content
    rid = response.json()["request_id"]
    assert response.json()["status"] is None
    fake_codex.script({"message": json.dumps({"lines": 1})})
    assert _upload(api, rid, {"text_file": "text"}).status_code == 200
    assert api.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
