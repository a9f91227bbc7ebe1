"""Path traversal on the endpoints that serve files (SPEC §8 artifacts/bundle, research §5.2 "file
preview endpoints confine paths to the run dir"): encoded, double-encoded, backslash, overlong
UTF-8 and full-width variants, absolute paths, and links an engine left in its artifacts/ folder
pointing outside (another user's run, the run's own logs, a file outside the data dir).
tests/runs/test_auto_run_lifecycle.py covers the plain `..`, `%2e%2e`, NUL bytes and over-long names."""

from __future__ import annotations

import io
import json
import urllib.parse
import zipfile

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

OUTSIDE = "OUTSIDE-THE-DATA-DIR-7f3a"
BOB_PRIVATE = "BOB-PRIVATE-ARTIFACT-91c2"
HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}


@pytest.fixture
def planted(api, bob_api, install_skill, fake_codex, tmp_path):
    """Alice's and Bob's finished runs; Alice's artifacts/ holds links an engine could have made."""
    from runs.models import Run

    install_skill("haiku-writer")
    fake_codex.script({"files": {"artifacts/haiku.md": BOB_PRIVATE}, "message": json.dumps(HAIKU)})
    bob_run = Run.objects.get(
        pk=bob_api.post(
            "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
        ).json()["request_id"]
    )
    fake_codex.script({"files": {"artifacts/haiku.md": "a\nb\nc\n"}, "message": json.dumps(HAIKU)})
    run = Run.objects.get(
        pk=api.post(
            "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
        ).json()["request_id"]
    )
    assert run.status == bob_run.status == "succeeded"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE)
    artifacts = run.run_dir / "artifacts"
    (artifacts / "leak.txt").symlink_to(outside / "secret.txt")
    (artifacts / "dirlink").symlink_to(outside, target_is_directory=True)
    (artifacts / "logs-link").symlink_to(run.records_dir / "logs", target_is_directory=True)
    (artifacts / "bob").symlink_to(bob_run.run_dir / "artifacts", target_is_directory=True)
    (artifacts / "bob-haiku.md").symlink_to(bob_run.run_dir / "artifacts" / "haiku.md")
    prompt = (run.records_dir / "logs" / "attempt-1.prompt.txt").read_text()
    return {"rid": str(run.pk), "bob": str(bob_run.pk), "outside": outside / "secret.txt", "prompt_marker": prompt[:60]}


def _variants(planted) -> list[str]:
    bob, outside = planted["bob"], str(planted["outside"])
    fullwidth = urllib.parse.quote("\uff0e\uff0e\uff0f")
    return [
        "../logs/attempt-1.prompt.txt",
        "artifacts/../logs/attempt-1.prompt.txt",
        "%2e%2e/logs/attempt-1.prompt.txt",
        "%2e%2e%2flogs%2fattempt-1.prompt.txt",
        "%2E%2E%2F%2E%2E%2F" + bob + "%2Fartifacts%2Fhaiku.md",
        "artifacts/../../" + bob + "/artifacts/haiku.md",
        "%252e%252e%252flogs%252fattempt-1.prompt.txt",
        "..%5clogs%5cattempt-1.prompt.txt",
        "..\\logs\\attempt-1.prompt.txt",
        "%c0%ae%c0%ae/logs/attempt-1.prompt.txt",
        "%c0%ae%c0%ae%c0%afetc%c0%afpasswd",
        fullwidth + "logs" + urllib.parse.quote("\uff0f") + "attempt-1.prompt.txt",
        "....//....//logs/attempt-1.prompt.txt",
        "artifacts/..;/logs/attempt-1.prompt.txt",
        "/" + outside.lstrip("/"),
        "%2F" + outside.lstrip("/").replace("/", "%2F"),
        "artifacts/" + outside,
        "artifacts//" + outside.lstrip("/"),
        "file:" + outside,
        "leak.txt",
        "artifacts/leak.txt",
        "dirlink/secret.txt",
        "artifacts/logs-link/attempt-1.prompt.txt",
        "bob/haiku.md",
        "bob-haiku.md",
    ]


def test_encoded_traversal_never_leaves_the_artifacts_dir(api, planted):
    leaked = {}
    for variant in _variants(planted):
        response = api.get(f"/v1/jobs/{planted['rid']}/artifacts/{variant}")
        body = b"".join(response.streaming_content) if response.streaming else response.content
        if response.status_code != 404 or any(
            m.encode() in body for m in (OUTSIDE, BOB_PRIVATE, planted["prompt_marker"])
        ):
            leaked[variant] = (response.status_code, body[:120])
    assert leaked == {}


def test_the_real_artifact_is_still_served(api, planted):
    """The control: the confinement above does not break the ordinary download."""
    response = api.get(f"/v1/jobs/{planted['rid']}/artifacts/artifacts/haiku.md")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"a\nb\nc\n"


def test_bundle_never_follows_links_out_of_the_run(api, planted):
    response = api.get(f"/v1/jobs/{planted['rid']}/bundle")
    assert response.status_code == 200
    content = b"".join(response.streaming_content)
    with zipfile.ZipFile(io.BytesIO(content)) as bundle:
        names = bundle.namelist()
        data = b"".join(bundle.read(n) for n in names)
    assert all(not n.startswith("/") and ".." not in n.split("/") for n in names), names
    for marker in (OUTSIDE, BOB_PRIVATE, planted["prompt_marker"]):
        assert marker.encode() not in data, marker
    assert "artifacts/haiku.md" in names


def test_artifact_listing_shows_nothing_from_outside(api, planted):
    """Every listed artifact is a file inside artifacts/ that downloads: links leading out are
    neither listed nor served (listing them would reveal names of other runs' or host files)."""
    listed = api.get(f"/v1/jobs/{planted['rid']}/artifacts").json()["artifacts"]
    assert "artifacts/haiku.md" in listed
    not_served = {path: api.get(f"/v1/jobs/{planted['rid']}/artifacts/{path}").status_code for path in listed}
    assert {path: code for path, code in not_served.items() if code != 200} == {}, listed


@pytest.mark.parametrize(
    "path",
    [
        "/static/../skillrunner/settings.py",
        "/static/%2e%2e/skillrunner/settings.py",
        "/static/..%2fskillrunner%2fsettings.py",
        "/static/%2e%2e%2f%2e%2e%2fmanage.py",
        "/static/..%5c..%5cmanage.py",
        "/static//etc/passwd",
        "/static/%2Fetc%2Fpasswd",
    ],
)
def test_static_files_never_leave_the_static_dirs(client, path):
    response = client.get(path)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert response.status_code in (301, 302, 400, 404), (path, response.status_code)
    assert b"SECRET_KEY" not in body and b"root:" not in body and b"DJANGO_SETTINGS_MODULE" not in body
