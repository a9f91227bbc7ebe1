"""R-SB7: the service never follows what the agent leaves in its run directory.

Each test is one attack path an agent (or a prompt steering it) can take with nothing but its
own run directory: a link where the service reads, writes or copies. The scripted engine plants
the link during its turn, exactly as a shell-capable agent would.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "SECRET-KEY-OF-THE-SERVICE-5d1e"
VICTIM = "A FILE THE SERVICE CAN WRITE-77ab"
HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}
BODY = {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}


@pytest.fixture
def data_files(settings, tmp_path):
    """What sits beside the runs in the data dir (the secret key), and a file outside it."""
    secret = settings.DATA_DIR / "secret_key"
    secret.write_text(SECRET)
    victim = tmp_path / "victim.pth"
    victim.write_text(VICTIM)
    return {"secret": secret, "victim": victim}


@pytest.fixture
def haiku(install_skill, fake_codex):
    install_skill("haiku-writer")
    return fake_codex


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _start(api, haiku, links: dict[str, str], **extra) -> str:
    haiku.script({"files": {"artifacts/haiku.md": "a\nb\nc\n"}, "links": links, "message": json.dumps(HAIKU)})
    return api.post("/v1/jobs", {**BODY, **extra}, format="json").json()["request_id"]


def test_artifacts_replaced_by_a_link_to_the_data_dir_lists_and_serves_nothing(api, haiku, data_files):
    rid = _start(api, haiku, {"artifacts": "../.."})
    listed = api.get(f"/v1/jobs/{rid}/artifacts").json()["artifacts"]
    assert listed == []
    for path in ("secret_key", "artifacts/secret_key", f"artifacts/runs/{rid}/artifacts/haiku.md"):
        response = api.get(f"/v1/jobs/{rid}/artifacts/{path}")
        assert response.status_code == 404 and SECRET.encode() not in _body(response), path
    bundle = zipfile.ZipFile(io.BytesIO(_body(api.get(f"/v1/jobs/{rid}/bundle"))))
    assert bundle.namelist() == ["result/result.json"]
    result = api.get(f"/v1/jobs/{rid}/result").json()["result"]
    # The repair round's write through the link fails in the sandbox (../.. is outside its world).
    assert result["status"] == "failed" and result["error"]["code"] in ("ARTIFACT_MISSING", "ENGINE_FAILED")


def test_a_link_at_the_bundle_path_is_never_served(api, haiku, data_files):
    rid = _start(api, haiku, {"bundle/run_bundle.zip": str(data_files["secret"])})
    response = api.get(f"/v1/jobs/{rid}/bundle")
    assert response.status_code == 200
    body = _body(response)
    assert SECRET.encode() not in body
    assert "artifacts/haiku.md" in zipfile.ZipFile(io.BytesIO(body)).namelist()


def test_a_link_at_the_partial_bundle_path_is_never_written_through(api, haiku, data_files):
    rid = _start(api, haiku, {"bundle/run_bundle.partial": str(data_files["victim"])})
    assert api.get(f"/v1/jobs/{rid}/bundle").status_code == 200
    assert data_files["victim"].read_text() == VICTIM


def test_logs_are_never_written_through_a_link_the_agent_left(api, haiku, data_files):
    rid = _start(
        api,
        haiku,
        {name: str(data_files["victim"]) for name in ("logs/attempt-1.prompt.txt", "logs/attempt-1.stdout.txt")},
    )
    assert data_files["victim"].read_text() == VICTIM
    logs = api.get(f"/v1/jobs/{rid}/logs").json()
    assert "haiku-writer" in logs["prompt"] and "thread.started" in logs["stdout"]


def test_a_cache_hit_never_copies_what_a_link_points_at(api, haiku, data_files):
    first = _start(api, haiku, {"artifacts/leak.txt": str(data_files["secret"])})
    assert api.get(f"/v1/jobs/{first}").json()["status"] == "succeeded"
    second = api.post("/v1/jobs", BODY, format="json").json()
    assert second["cache_hit"] is True
    rid = second["request_id"]
    assert api.get(f"/v1/jobs/{rid}/artifacts").json()["artifacts"] == ["artifacts/haiku.md"]
    assert api.get(f"/v1/jobs/{rid}/artifacts/artifacts/leak.txt").status_code == 404
    assert SECRET.encode() not in _body(api.get(f"/v1/jobs/{rid}/bundle"))


def test_a_declared_artifact_name_never_moves_a_file_out_of_the_run(api, haiku, tmp_path):
    """A version stored before names were validated (an absolute x-filename) moves nothing outside;
    install refusing such names is tested in tests/skills."""
    from skills.models import SkillVersion

    escaped = tmp_path / "escaped" / "poem.md"
    version = SkillVersion.objects.get(skill__skill_id="haiku-writer")
    version.artifacts = [{"role": "poem", "filename": str(escaped), "required": True, "property": "haiku_file"}]
    version.save()
    haiku.script({"files": {"poem.md": "a\nb\nc\n"}, "message": json.dumps({**HAIKU, "haiku_file": "poem.md"})})
    rid = api.post("/v1/jobs", BODY, format="json").json()["request_id"]
    assert not escaped.exists()
    assert api.get(f"/v1/jobs/{rid}/result").json()["result"]["error"]["code"] == "ARTIFACT_MISSING"


def test_a_link_where_an_artifact_should_be_is_missing_not_followed(api, haiku, data_files):
    haiku.script({"links": {"artifacts/haiku.md": str(data_files["secret"])}, "message": json.dumps(HAIKU)})
    rid = api.post("/v1/jobs", BODY, format="json").json()["request_id"]
    result = api.get(f"/v1/jobs/{rid}/result").json()["result"]
    assert result["error"]["code"] == "ARTIFACT_MISSING" and "haiku.md" in result["error"]["message"]
    assert result["artifacts"] == []
    assert SECRET.encode() not in _body(api.get(f"/v1/jobs/{rid}/bundle"))


def test_links_left_elsewhere_do_not_fail_a_run(api, haiku, data_files):
    rid = _start(api, haiku, {"notes/secret": str(data_files["secret"]), "up": "../.."})
    result = api.get(f"/v1/jobs/{rid}/result").json()["result"]
    assert result["status"] == "success" and result["artifacts"] == ["artifacts/haiku.md"]
