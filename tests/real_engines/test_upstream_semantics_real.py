"""Upstream's upload semantics and model names (SPEC R-UP8, R-UP9) with the real Codex against
the scripted model server: what reaches the model, and that a run whose inputs its skill refuses
ends at once without the engine ever starting."""

from __future__ import annotations

import json

import pytest

from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import clone_skill, error_code, make_zip, upload, zip_folder

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

HAIKU = {
    "topic": "autumn sea",
    "haiku": ["grey waves fold", "a gull leans on the wind", "salt on the lantern"],
    "haiku_file": "artifacts/haiku.md",
}
WRITE_HAIKU = {
    "shell": "printf 'grey waves fold\\na gull leans on the wind\\nsalt on the lantern\\n' > artifacts/haiku.md"
}


def _turns(model_server) -> list:
    return [request for request in model_server.requests if request.step_index is not None]


def test_model_at_effort_reaches_codex_as_model_and_effort(api, install_skill, real_engine, model_server):
    install_skill("haiku-writer")
    real_engine("codex")
    model_server.set_script([WRITE_HAIKU, {"text": json.dumps(HAIKU)}])
    body = {"skill_id": "haiku-writer", "engine": "codex", "model": "gpt-5.5@minimal", "input": {"topic": "sea"}}
    created = api.post("/v1/jobs", body, format="json")
    assert created.status_code == 200, created.content
    status = api.get(f"/v1/jobs/{created.json()['request_id']}").json()
    assert (status["status"], status["model"]) == ("succeeded", "gpt-5.5"), status
    turns = _turns(model_server)
    assert turns and {request.model for request in turns} == {"gpt-5.5"}
    assert {request.body["reasoning"]["effort"] for request in turns} == {"minimal"}


def test_an_uncatalogued_model_is_refused_before_codex_starts(api, install_skill, real_engine, model_server):
    install_skill("haiku-writer")
    real_engine("codex")
    body = {"skill_id": "haiku-writer", "engine": "codex", "model": "gpt-0-unknown", "input": {"topic": "sea"}}
    refused = api.post("/v1/jobs", body, format="json")
    assert (refused.status_code, error_code(refused)) == (400, "MODEL_UNSUPPORTED")
    assert "gpt-0-unknown" in refused.json()["detail"]["message"]
    assert "gpt-5.5" in refused.json()["detail"]["allowed_models"]
    assert model_server.requests == []


@pytest.mark.parametrize(
    ("create", "inputs", "code"),
    [
        ({"input": {"topic": 7}}, None, "INPUT_VALIDATION_FAILED"),  # the skill's input schema
        ({"input": {}, "parameter": {}}, make_zip({"other.txt": "x"}), "INPUT_FILE_MISSING"),  # a required file
    ],
    ids=["schema", "required-file"],
)
def test_inputs_the_uploaded_skill_refuses_end_the_run_at_once(
    api, real_engine, model_server, tmp_path, create, inputs, code
):
    real_engine("codex")
    skill = "word-count" if code == "INPUT_FILE_MISSING" else "haiku-writer"
    folder = clone_skill(BUNDLED_SKILLS / skill, tmp_path, skill_id=f"{skill}-upload")
    rid = api.post("/v1/jobs", {"skill_source": "temp_upload", "engine": "codex", **create}, format="json").json()[
        "request_id"
    ]
    parts = {"skill_package": upload("skill_package.zip", zip_folder(folder))}
    if inputs is not None:
        parts["file"] = upload("inputs.zip", inputs)
    response = api.post(f"/v1/jobs/{rid}/upload", parts, format="multipart")
    assert (response.status_code, response.json()["status"]) == (200, "failed"), response.content
    status = api.get(f"/v1/jobs/{rid}").json()
    assert (status["status"], status["error"]["code"]) == ("failed", code)
    assert api.get(f"/v1/jobs/{rid}/result").json()["result"]["error"]["code"] == code
    assert model_server.requests == []  # Codex never started
