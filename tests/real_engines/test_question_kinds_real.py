"""Question kinds end to end with the REAL Codex against the scripted model server: the model asks
for a form (fill_fields) or for files (upload_files) with an ask_user envelope as the interactive
patch shows it; the run waits on a pending carrying the kind's hint data; the reply resumes Codex's session,
which reads the form in words or the files at the paths it is told, in its sandbox.

django-q2 runs turns inline in these tests (tests/settings.py): each POST returns once its turn is over.
"""

from __future__ import annotations

import json

import pytest

from runs.models import Run
from tests.support.conversations import PLAN, history_of, pending_of, reply, status_of
from tests.support.scripted_model_server import ScriptedModelServer
from tests.upstream.test_reply_files import reply_files

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

DONE = {"text": json.dumps({**PLAN, "__SKILL_DONE__": True})}
FORM_QUESTION = {
    "interaction_id": 1,
    "kind": "fill_fields",
    "prompt": "A few details before I plan:",
    "fields": [
        {"name": "city", "label": "City", "type": "text", "required": True},
        {"name": "days", "label": "Days", "type": "integer", "required": True},
        {"name": "season", "label": "Season", "type": "text"},
    ],
}
FILES_QUESTION = {
    "interaction_id": 1,
    "kind": "upload_files",
    "prompt": "Please send your notes for the trip.",
    "files": [{"name": "notes", "accept": ".txt", "required": True}],
}


@pytest.fixture
def model_server():
    with ScriptedModelServer() as server:
        yield server


def _start_codex(api) -> str:
    body = {
        "skill_id": "trip-planner",
        "engine": "codex",
        "input": {},
        "runtime_options": {"execution_mode": "interactive"},
    }
    created = api.post("/v1/jobs", body, format="json")
    assert created.status_code == 200, created.content
    return created.json()["request_id"]


def _explained(api, request_id: str) -> dict:
    status = status_of(api, request_id)
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    return {"status": status, "stdout": logs["stdout"][-2000:], "stderr": logs["stderr"][-2000:]}


def _model_turns(model_server) -> list:
    return [r for r in model_server.requests if r.step_index is not None]


def test_codex_asks_for_a_form_and_reads_the_answer_in_words(api, install_skill, real_engine, model_server):
    install_skill("trip-planner")
    real_engine("codex")
    model_server.set_script(
        [
            {"text": "Let me ask first.\n\n" + json.dumps({"ask_user": FORM_QUESTION})},
            {"shell": "printf '# Kyoto\\n' > artifacts/plan.md"},
            DONE,
        ]
    )
    request_id = _start_codex(api)
    assert status_of(api, request_id)["status"] == "waiting_user", _explained(api, request_id)
    pending = pending_of(api, request_id)
    assert (pending["kind"], pending["prompt"], pending["required_fields"]) == (
        "fill_fields",
        "A few details before I plan:",
        ["city", "days"],
    )
    assert [(f["name"], f["type"], f["required"]) for f in pending["ui_hints"]["fields"]] == [
        ("city", "text", True),
        ("days", "integer", True),
        ("season", "text", False),
    ]
    # The agent learned the six kinds from the run's own SKILL.md (the interactive patch).
    skill_copy = next(Run.objects.get(pk=request_id).run_dir.rglob("trip-planner/SKILL.md")).read_text()
    assert '"kind": "fill_fields"' in skill_copy and '"kind": "risk_ack"' in skill_copy

    answered = reply(api, request_id, 1, {"fields": {"city": "Kyoto", "days": 2, "season": "autumn"}})
    assert answered.status_code == 200, answered.content
    status = status_of(api, request_id)
    assert status["status"] == "succeeded", _explained(api, request_id)
    assert status["attempt_number"] == 2
    assert history_of(api, request_id)[0]["response"] == {"fields": {"city": "Kyoto", "days": 2, "season": "autumn"}}
    last = _model_turns(model_server)[-1]
    # The resumed Codex session carried the whole conversation, the form's answer as words.
    assert "trip-planner" in last.user_texts[0]
    assert "city: Kyoto\ndays: 2\nseason: autumn" in last.user_texts


def test_codex_asks_for_files_and_reads_them_in_its_sandbox(api, install_skill, real_engine, model_server):
    install_skill("trip-planner")
    real_engine("codex")
    model_server.set_script(
        [
            {"text": json.dumps({"ask_user": FILES_QUESTION})},
            {"shell": "cat reply-files/1/kyoto-notes.txt > artifacts/plan.md"},
            DONE,
        ]
    )
    request_id = _start_codex(api)
    assert status_of(api, request_id)["status"] == "waiting_user", _explained(api, request_id)
    pending = pending_of(api, request_id)
    assert pending["kind"] == "upload_files"
    assert pending["ui_hints"]["files"] == [{"name": "notes", "required": True, "accept": ".txt"}]

    notes = b"# Kyoto\n\nFushimi Inari at dawn, then Arashiyama.\n"
    answered = reply_files(api, request_id, {"interaction_id": 1, "text": "My notes"}, [("kyoto-notes.txt", notes)])
    assert answered.status_code == 200, answered.content
    status = status_of(api, request_id)
    assert status["status"] == "succeeded", _explained(api, request_id)
    recorded = history_of(api, request_id)[0]["response"]
    assert recorded["text"] == "My notes"
    assert [(f["name"], f["path"], f["size_bytes"]) for f in recorded["files"]] == [
        ("kyoto-notes.txt", "reply-files/1/kyoto-notes.txt", len(notes))
    ]
    turns = _model_turns(model_server)
    assert "My notes\n\nFiles attached to this reply (in the run directory):\n- reply-files/1/kyoto-notes.txt" in (
        turns[-1].user_texts
    )
    # Codex really read the file at the path it was told: its copy is the plan artifact.
    assert (Run.objects.get(pk=request_id).run_dir / "artifacts" / "plan.md").read_bytes() == notes
