"""R-SB7 with the real Codex CLI: the agent's own shell commands leave links where the service
reads and writes (artifacts, the bundle's partial file, the logs), and the service follows none.

One engine is enough here: what is tested is the service's side, which is the same for every
engine; tests/runs/test_agent_links.py covers each path with the scripted engine.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

SECRET = "SECRET-KEY-OF-THE-SERVICE-real-3c9a"
VICTIM = "A FILE THE SERVICE CAN WRITE-real-51e0"
HAIKU = {"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}


def test_links_left_by_the_real_agent_are_never_followed(
    api, install_skill, real_engine, model_server, settings, tmp_path
):
    (settings.DATA_DIR / "secret_key").write_text(SECRET)
    victim = tmp_path / "victim.pth"
    victim.write_text(VICTIM)
    install_skill("haiku-writer")
    real_engine("codex")
    model_server.set_script(
        [
            {
                "shell": (
                    "printf 'a\\nb\\nc\\n' > artifacts/haiku.md"
                    " && ln -s ../../../secret_key artifacts/key.txt && ln -s ../../.. artifacts/data"
                    f" && mkdir -p bundle logs && ln -s {victim} bundle/run_bundle.partial"
                    f" && ln -s {victim} logs/attempt-1.prompt.txt"
                )
            },
            {"text": json.dumps(HAIKU)},
        ]
    )
    rid = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
    ).json()["request_id"]

    result = api.get(f"/v1/jobs/{rid}/result").json()["result"]
    assert result["status"] == "success", result  # links alone never fail a run
    assert result["artifacts"] == ["artifacts/haiku.md"]
    from runs.models import Run

    run_dir = Run.objects.get(pk=rid).run_dir
    assert (run_dir / "artifacts" / "key.txt").is_symlink(), "the agent's command did not run"
    assert api.get(f"/v1/jobs/{rid}/artifacts").json()["artifacts"] == ["artifacts/haiku.md"]
    for path in ("artifacts/key.txt", "artifacts/data/secret_key"):
        assert api.get(f"/v1/jobs/{rid}/artifacts/{path}").status_code == 404, path
    bundle = b"".join(api.get(f"/v1/jobs/{rid}/bundle").streaming_content)
    assert SECRET.encode() not in bundle
    assert zipfile.ZipFile(io.BytesIO(bundle)).namelist() == ["result/result.json", "artifacts/haiku.md"]
    assert victim.read_text() == VICTIM
    assert "haiku-writer" in api.get(f"/v1/jobs/{rid}/logs").json()["prompt"]
