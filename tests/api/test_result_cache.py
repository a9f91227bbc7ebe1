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
    kinds = [e["kind"] for e in api.get(f"/v1/jobs/{second['request_id']}/events/history").json()["events"]]
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
