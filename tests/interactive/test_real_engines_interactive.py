"""Interactive runs with the REAL Codex, Gemini CLI and Claude Code against the scripted model
server: a question asked in plain words only (the backend builds the pending from the message,
R-LC4), and a run that finishes without the done marker (soft completion, R-LC2 step 3).

The ask_user + done-marker case is in tests/real_engines/test_service_real_engines.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.engine_env import engine_binary

from .helpers import PLAN, history_of, kill_all, pending_of, processes_in, result_of, status_of, warning_codes

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ENGINES = ("codex", "gemini", "claude")
MODELS = {"codex": "gpt-5.5", "gemini": "gemini-2.5-flash", "claude": ""}
PLAIN_QUESTION = "Before I plan anything: which city would you like to visit, and how many days do you have?"
WRITE_PLAN = {"shell": "printf '# Kyoto\\n\\nDay 1: Fushimi Inari at dawn\\n' > artifacts/plan.md"}


@pytest.fixture
def real_engine(settings, model_server):
    """Points one engine of the service at the scripted model server, as an operator would."""

    def configure(engine: str) -> None:
        binary = engine_binary(engine)
        if not binary.exists():
            pytest.fail(f"{engine} CLI not installed at {binary}; run `make engines`", pytrace=False)
        engines = {name: dict(conf) for name, conf in settings.SKILLRUNNER_ENGINES.items()}
        engines[engine].update(
            binary=str(binary),
            base_url=model_server.url + ("/v1" if engine == "codex" else ""),
            api_key="test-key-not-secret",
            model=MODELS[engine],
        )
        settings.SKILLRUNNER_ENGINES = engines
        settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0

    yield configure
    runs = Path(settings.DATA_DIR) / "runs"
    if runs.is_dir():  # whatever a test asserted, no engine process outlives it
        for run_dir in runs.iterdir():
            kill_all(processes_in(run_dir))


def _logs(api, request_id: str) -> str:
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    return logs["stdout"][-2000:] + "\n--- stderr ---\n" + logs["stderr"][-2000:]


@pytest.mark.parametrize("engine", ENGINES)
def test_real_engine_plain_text_question_gets_backend_built_pending(engine, api, trip, real_engine, model_server, background_runs):
    """R-LC4 with a real CLI: the model asks in plain words, with no ask_user envelope and no JSON;
    the run waits on a pending the backend built from that message, and can be canceled."""
    real_engine(engine)
    model_server.set_script([{"text": PLAIN_QUESTION}])
    run = background_runs(engine=engine)
    status = run.wait_for(api, {"waiting_user", "failed", "succeeded", "canceled"}, timeout=120)
    assert status["status"] == "waiting_user", (status, _logs(api, run.request_id))
    assert "ASK_USER_PAYLOAD_INVALID" not in warning_codes(status)
    pending = pending_of(api, run.request_id)
    assert pending["interaction_id"] == 1
    assert pending["prompt"] == PLAIN_QUESTION
    assert pending["kind"] == "open_text" and pending["options"] == []
    assert pending["default_decision_policy"] == "engine_judgement"
    assert pending["context"]["source"] == "assistant_message"
    assert history_of(api, run.request_id)[0]["prompt"] == PLAIN_QUESTION
    from runs.models import Run

    assert Run.objects.get(pk=run.request_id).session_handle, "the engine's session id must be kept for the resume"

    assert api.post(f"/v1/jobs/{run.request_id}/cancel").json()["accepted"] is True
    run.join(timeout=60)
    assert status_of(api, run.request_id)["status"] == "canceled"


@pytest.mark.parametrize("engine", ENGINES)
def test_real_engine_finishing_without_done_marker_soft_completes(engine, api, trip, real_engine, model_server, background_runs):
    """R-LC2 step 3 with a real CLI: the model writes the artifact and answers with schema-valid
    JSON but no __SKILL_DONE__: succeeded with INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER."""
    real_engine(engine)
    model_server.set_script([WRITE_PLAN, {"text": json.dumps(PLAN)}])
    run = background_runs(engine=engine)
    status = run.wait_for(api, {"waiting_user", "failed", "succeeded", "canceled"}, timeout=120)
    assert status["status"] == "succeeded", (status, _logs(api, run.request_id))
    assert "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER" in warning_codes(status)
    assert status["attempt_number"] == 1 and status["interaction_count"] == 0
    result = result_of(api, run.request_id)
    assert result["data"] == PLAN
    assert result["artifacts"] == ["artifacts/plan.md"]
    assert "INTERACTIVE_COMPLETED_WITHOUT_DONE_MARKER" in [w["code"] for w in result["validation_warnings"]]
    run.join(timeout=60)
