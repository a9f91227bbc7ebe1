"""A package in today's format end to end with the real Codex and OpenCode CLIs and the scripted
model (R-OU1, R-SK7, R-SK8, R-SK9): tests/support/skills/field-notes, whose model writes its report at a
path of its choosing with a script that imports the skill's runtime dependency, lists a figure in
an artifact manifest by absolute path, and returns the paths. The files end up in the result, the
bundle and GET …/artifacts; the template was the prompt; the skill's model and reasoning effort
reached the model server.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from tests.support.engine_env import SERVICE_MODELS, SERVICE_URL_PATHS, require_engine
from tests.support.scripted_model_server import ScriptedModelServer

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

WRITE_FILES = (
    "mkdir -p drafts && "
    "python -c 'import pyjokes; print(\"# Tides\\n\\n\" + pyjokes.get_joke())' > drafts/tides.md && "
    "echo 'high water 06:12' > drafts/figure.txt && "
    'printf \'{"figure": "%s/drafts/figure.txt"}\' "$PWD" > drafts/sources.json'
)
ANSWER = {"summary": "Two tides a day.", "report": "drafts/tides.md", "chart": None, "sources": "drafts/sources.json"}
# The skill's model (assets/codex_config.toml, assets/opencode_config.json) as the model server saw
# it, and where its reasoning effort is in the request body.
SKILL_DEFAULTS_SEEN = {
    "codex": ("gpt-5.1-codex-mini", lambda body: body["reasoning"]["effort"]),
    "opencode": ("field-notes-model", lambda body: body["reasoning_effort"]),
}


@pytest.fixture
def model_server():
    with ScriptedModelServer() as server:
        yield server


@pytest.mark.parametrize("engine", sorted(SKILL_DEFAULTS_SEEN))
def test_todays_package_runs_end_to_end_with_a_real_cli(engine, api, install_skill, settings, model_server):
    install_skill("field-notes")
    engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
    engines[engine].update(
        binary=str(require_engine(engine)),
        base_url=model_server.url + SERVICE_URL_PATHS.get(engine, ""),
        api_key="test-key-not-secret",
        model=SERVICE_MODELS[engine],  # the operator's default; the skill's own model wins over it (R-SK9)
    )
    settings.SKILLRUNNER_ENGINES = engines
    model_server.set_script([{"shell": WRITE_FILES}, {"text": json.dumps(ANSWER)}])

    created = api.post(
        "/v1/jobs", {"skill_id": "field-notes", "engine": engine, "input": {"topic": "tides"}}, format="json"
    )
    assert created.status_code == 200, created.content
    request_id = created.json()["request_id"]
    status = api.get(f"/v1/jobs/{request_id}").json()
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    assert status["status"] == "succeeded", (status["error"], logs["stdout"][-3000:], logs["stderr"][-2000:])

    # R-OU1: the files the model chose are collected and the answer points at them.
    result = api.get(f"/v1/jobs/{request_id}/result").json()["result"]
    assert result["data"] == {**ANSWER, "report": "artifacts/tides.md", "sources": "artifacts/sources.json"}
    expected = ["artifacts/figure.txt", "artifacts/sources.json", "artifacts/tides.md"]
    assert result["artifacts"] == expected
    assert api.get(f"/v1/jobs/{request_id}/artifacts").json()["artifacts"] == expected
    bundle = zipfile.ZipFile(io.BytesIO(b"".join(api.get(f"/v1/jobs/{request_id}/bundle").streaming_content)))
    report = bundle.read("artifacts/tides.md").decode()
    assert report.startswith("# Tides\n") and len(report.strip()) > len("# Tides")  # pyjokes ran (R-SK7)
    assert json.loads(bundle.read("artifacts/sources.json")) == {"figure": "artifacts/figure.txt"}
    assert bundle.read("artifacts/figure.txt").decode() == "high water 06:12\n"

    # R-SK7: no dependency warning; R-SK9: the operator-only keys of the package were ignored.
    codes = [w["code"] for w in status["warnings"]]
    assert "RUNTIME_DEPENDENCIES_INJECTION_FAILED" not in codes
    assert "SKILL_ENGINE_CONFIG_IGNORED" in codes

    turns = [r for r in model_server.requests if r.step_index is not None]
    # R-SK8: the skill's template was the prompt.
    assert turns[0].latest_user_text.startswith("Use the skill field-notes to write field notes about tides")
    # R-SK9: the skill's model and reasoning effort, not the operator's default model.
    model, effort = SKILL_DEFAULTS_SEEN[engine]
    assert {r.model for r in turns} == {model}
    assert effort(turns[0].body) == "high"
    assert turns[-1].tool_results, "the final model call carried no tool result"
