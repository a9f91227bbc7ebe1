"""Identical auto runs reuse an earlier result (`cache_hit`), unless `no_cache` (R-AD4)."""

import io
import json
import zipfile

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}
BODY = {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}


@pytest.fixture
def haiku_engine(install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script({"files": {"artifacts/haiku.md": "a\nb\nc\n"}, "message": json.dumps(HAIKU)})
    return fake_codex


def test_identical_auto_run_is_served_from_cache_with_its_artifacts(api, haiku_engine):
    first = api.post("/v1/jobs", BODY, format="json").json()
    second = api.post("/v1/jobs", BODY, format="json").json()

    assert first["cache_hit"] is False and second["cache_hit"] is True
    assert second["status"] == "succeeded" and second["request_id"] != first["request_id"]
    assert len(haiku_engine.invocations()) == 1
    status = api.get(f"/v1/jobs/{second['request_id']}").json()
    assert status["cache_hit"] is True and status["status"] == "succeeded"
    assert api.get(f"/v1/jobs/{second['request_id']}/result").json()["result"]["data"] == HAIKU
    bundle = zipfile.ZipFile(io.BytesIO(b"".join(api.get(f"/v1/jobs/{second['request_id']}/bundle").streaming_content)))
    assert bundle.read("artifacts/haiku.md") == b"a\nb\nc\n"
    kinds = [e["kind"] for e in api.get(f"/v1/jobs/{second['request_id']}/events/history?after_seq=0").json()["events"]]
    assert kinds == ["result", "status"]


def test_no_cache_runs_the_engine_again(api, haiku_engine):
    api.post("/v1/jobs", BODY, format="json")
    again = api.post("/v1/jobs", {**BODY, "runtime_options": {"no_cache": True}}, format="json").json()
    assert again["cache_hit"] is False
    assert len(haiku_engine.invocations()) == 2


def test_different_input_or_other_user_is_not_a_cache_hit(api, bob_api, haiku_engine):
    api.post("/v1/jobs", BODY, format="json")
    assert api.post("/v1/jobs", {**BODY, "input": {"topic": "hill"}}, format="json").json()["cache_hit"] is False
    assert bob_api.post("/v1/jobs", BODY, format="json").json()["cache_hit"] is False


def test_failed_runs_and_interactive_runs_are_never_reused(api, install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script({"message": "no json here"})
    failed = api.post("/v1/jobs", BODY, format="json").json()["request_id"]
    assert api.get(f"/v1/jobs/{failed}").json()["status"] == "failed"
    assert api.post("/v1/jobs", BODY, format="json").json()["cache_hit"] is False
    interactive = {**BODY, "runtime_options": {"execution_mode": "interactive"}}
    api.post("/v1/jobs", interactive, format="json")
    assert api.post("/v1/jobs", interactive, format="json").json()["cache_hit"] is False


# --- R-OP9: the key covers everything that can change the answer -------------------------------


def _hit(api, body) -> bool:
    return api.post("/v1/jobs", body, format="json").json()["cache_hit"]


def test_an_updated_skill_is_a_miss(api, haiku_engine, tmp_path):
    """A new package version runs the engine again, though input and parameter are the same."""
    import shutil

    from tests.conftest import BUNDLED_SKILLS

    api.post("/v1/jobs", BODY, format="json")
    updated = tmp_path / "update" / "haiku-writer"
    shutil.copytree(BUNDLED_SKILLS / "haiku-writer", updated)
    runner = json.loads((updated / "assets" / "runner.json").read_text())
    (updated / "assets" / "runner.json").write_text(json.dumps({**runner, "version": "1.0.1"}))
    from skills.services import install_path

    install_path(updated)
    assert _hit(api, BODY) is False
    assert _hit(api, BODY) is True  # and the new version's own result is reused


def test_another_model_parameter_or_execution_option_is_a_miss(api, haiku_engine, settings):
    settings.SKILLRUNNER_ALLOW_ANY_MODEL = True  # models the catalogue does not list (R-UP9)
    api.post("/v1/jobs", {**BODY, "model": "model-a"}, format="json")
    assert _hit(api, {**BODY, "model": "model-b"}) is False
    assert _hit(api, {**BODY, "model": "model-a"}) is True
    api.post("/v1/jobs", {**BODY, "parameter": {"mood": "calm"}}, format="json")
    assert _hit(api, {**BODY, "parameter": {"mood": "playful"}}) is False
    assert _hit(api, {**BODY, "parameter": {"mood": "calm"}}) is True
    api.post("/v1/jobs", BODY, format="json")
    assert _hit(api, {**BODY, "runtime_options": {"hard_timeout_seconds": 7}}) is False
    # An interactive-only option cannot change an auto run's answer.
    assert _hit(api, {**BODY, "runtime_options": {"session_timeout_sec": 99}}) is True


def test_the_effective_model_is_what_counts(api, haiku_engine, configure_engine):
    configure_engine("codex", model="model-default")
    api.post("/v1/jobs", BODY, format="json")
    assert _hit(api, {**BODY, "model": "model-default"}) is True


def test_another_provider_base_url_is_a_miss(api, haiku_engine, configure_engine):
    api.post("/v1/jobs", BODY, format="json")
    configure_engine("codex", base_url="http://127.0.0.1:9/v1")
    assert _hit(api, BODY) is False


def test_another_cli_version_is_a_miss(api, haiku_engine, configure_engine):
    """An upgraded engine CLI (same path or not) may answer differently."""
    api.post("/v1/jobs", BODY, format="json")
    upgraded = haiku_engine.root / "codex-upgraded"  # beside the engine, which the sandbox shows with it
    upgraded.write_text(
        f'#!/bin/sh\n[ "$1" = "--version" ] && {{ echo "codex-cli 9.9.9"; exit 0; }}\nexec "{haiku_engine.binary}" "$@"\n'
    )
    upgraded.chmod(0o755)
    configure_engine("codex", binary=str(upgraded))
    assert _hit(api, BODY) is False
    assert len(haiku_engine.invocations()) == 2


def test_another_engine_is_another_key(haiku_engine):
    from runs.cache import cache_key
    from skills.models import SkillVersion

    version = SkillVersion.objects.get(skill__skill_id="haiku-writer")
    options = {"execution_mode": "auto", "hard_timeout_seconds": 60}
    keys = {engine: cache_key(version, engine, "m", {"topic": "sea"}, {}, options) for engine in ("codex", "gemini")}
    assert keys["codex"] != keys["gemini"]


@pytest.fixture
def word_count_engine(install_skill, fake_codex):
    install_skill("word-count")
    fake_codex.script({"message": json.dumps({"lines": 1, "words": 2})})
    return fake_codex


def _word_count_run(api, document: str) -> dict:
    """A word-count run whose document comes by upload, where its cache key is made."""
    from tests.support.jobs import make_zip, upload

    rid = api.post("/v1/jobs", {"skill_id": "word-count", "engine": "codex", "input": {}}, format="json").json()[
        "request_id"
    ]
    zipped = upload("inputs.zip", make_zip({"document": document}))
    return api.post(f"/v1/jobs/{rid}/upload", {"file": zipped}, format="multipart").json()


def test_uploaded_files_are_part_of_the_key(api, word_count_engine):
    """Runs with file inputs are reused when the uploaded files are the same, by content."""
    assert _word_count_run(api, "one two\n")["cache_hit"] is False
    again = _word_count_run(api, "one two\n")
    assert again["cache_hit"] is True and again["status"] == "succeeded"
    status = api.get(f"/v1/jobs/{again['request_id']}").json()
    assert status["cache_hit"] is True and status["status"] == "succeeded"
    kinds = [e["kind"] for e in api.get(f"/v1/jobs/{again['request_id']}/events/history?after_seq=0").json()["events"]]
    assert kinds[-3:] == ["input_uploaded", "result", "status"]
    assert api.get(f"/v1/jobs/{again['request_id']}/result").json()["result"]["data"] == {"lines": 1, "words": 2}
    assert _word_count_run(api, "three four\n")["cache_hit"] is False
    assert len(word_count_engine.invocations()) == 2


def test_a_cached_result_never_points_into_the_earlier_run(api, haiku_engine):
    """Artifacts are copies in the new run; a path into the earlier run's directory is made run-relative."""
    from runs.models import Run

    first = Run.objects.get(pk=api.post("/v1/jobs", BODY, format="json").json()["request_id"])
    absolute = f"{first.run_dir}/artifacts/haiku.md"
    first.result = {**first.result, "data": {**HAIKU, "haiku_file": absolute, "note": f"see {absolute}"}}
    first.save(update_fields=["result"])

    second = Run.objects.get(pk=api.post("/v1/jobs", BODY, format="json").json()["request_id"])
    assert second.cache_hit
    data = second.result["data"]
    assert data["haiku_file"] == "artifacts/haiku.md"
    assert data["note"] == f"see {second.run_dir}/artifacts/haiku.md"
    assert str(first.run_dir) not in json.dumps(second.result)
    copied = second.run_dir / "artifacts" / "haiku.md"
    assert (
        copied.read_text() == "a\nb\nc\n"
        and copied.stat().st_ino != (first.run_dir / "artifacts/haiku.md").stat().st_ino
    )


# --- R-FS2: a cache hit copies outside any transaction, within a size cap -----------------------


def test_a_cache_hit_copies_outside_any_transaction(api, haiku_engine, monkeypatch):
    from django.db import connection

    from runs import runfiles

    seen = []
    real_copy = runfiles.copy_files

    def spy(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        return real_copy(*args, **kwargs)

    monkeypatch.setattr(runfiles, "copy_files", spy)
    api.post("/v1/jobs", BODY, format="json")
    assert _hit(api, BODY) is True
    assert seen == [False]


def test_artifacts_past_the_copy_cap_are_not_reused(api, haiku_engine, settings):
    """Over SKILLRUNNER_CACHE_MAX_COPY_BYTES the run executes instead, and nothing partial is left."""
    from runs.models import Run

    api.post("/v1/jobs", BODY, format="json")
    settings.SKILLRUNNER_CACHE_MAX_COPY_BYTES = 3
    again = api.post("/v1/jobs", BODY, format="json").json()
    assert again["cache_hit"] is False
    assert api.get(f"/v1/jobs/{again['request_id']}").json()["status"] == "succeeded"
    assert len(haiku_engine.invocations()) == 2
    run = Run.objects.get(pk=again["request_id"])
    assert (run.run_dir / "artifacts" / "haiku.md").read_text() == "a\nb\nc\n"


# --- retention: a run whose files were removed is not reused ------------------------------------


def _files_removed(request_id: str) -> None:
    """Retention's mark (runs.retention), the files left in place: the reuse rule decides, not a
    copy failing for want of the artifacts."""
    from django.utils import timezone

    from runs.models import Run

    Run.objects.filter(pk=request_id).update(files_removed_at=timezone.now())


def test_a_run_whose_files_retention_removed_is_not_reused(api, haiku_engine):
    _files_removed(api.post("/v1/jobs", BODY, format="json").json()["request_id"])
    assert _hit(api, BODY) is False
    assert len(haiku_engine.invocations()) == 2
    assert _hit(api, BODY) is True  # the run that executed instead is reused in its turn


def test_a_run_whose_files_retention_removed_is_not_reused_after_an_upload(api, word_count_engine):
    _files_removed(_word_count_run(api, "one two\n")["request_id"])
    assert _word_count_run(api, "one two\n")["cache_hit"] is False
    assert len(word_count_engine.invocations()) == 2
