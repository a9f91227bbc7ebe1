"""Spend limits at the provider relay (R-SB9) with the real CLIs against the scripted model server:
a run past its budget ends mid-turn with BUDGET_EXCEEDED, its spending recorded; a user past the
day's budget is refused at admission."""

from __future__ import annotations

import json

import pytest

from tests.support.scripted_model_server import ScriptedModelServer

pytestmark = [pytest.mark.real_engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# Many model calls: each shell step is one, the answer one more.
SCRIPT = [{"shell": f"echo step-{n}"} for n in range(5)] + [
    {"shell": "printf 'a\\nb\\nc\\n' > artifacts/haiku.md"},
    {"text": json.dumps({"topic": "t", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"})},
]


@pytest.fixture
def model_server():
    with ScriptedModelServer(SCRIPT) as server:
        yield server


def _create(api, engine: str, **runtime_options):
    body = {"skill_id": "haiku-writer", "engine": engine, "input": {"topic": "t"}, "runtime_options": runtime_options}
    return api.post("/v1/jobs", body, format="json")


def _turn_calls(model_server) -> int:
    return len([r for r in model_server.requests if r.step_index is not None])


@pytest.mark.parametrize("engine", ["codex", "claude"])  # a resumable engine and the sticky one
def test_a_run_past_its_budget_ends_mid_turn(engine, api, install_skill, real_engine, model_server):
    install_skill("haiku-writer")
    real_engine(engine)
    created = _create(api, engine, max_tokens=50)
    assert created.status_code == 200, created.content
    request_id = created.json()["request_id"]

    from runs.models import Run, TokenSpend

    run = Run.objects.get(pk=request_id)
    assert run.status == "failed", run.error
    error = run.error
    assert error["code"] == "BUDGET_EXCEEDED" and error["which"] == "run" and error["limit"] == 50
    assert error["used"] > 50 and run.model_tokens == error["used"]
    assert _turn_calls(model_server) < len(SCRIPT)  # it stopped before its script's end
    assert TokenSpend.objects.get(owner=run.owner).tokens == run.model_tokens
    status = api.get(f"/v1/jobs/{request_id}").json()
    assert status["error"]["code"] == "BUDGET_EXCEEDED"
    assert status["model_tokens"] == run.model_tokens


def test_a_user_past_the_days_budget_is_refused_at_admission(
    api, install_skill, real_engine, model_server, settings, alice
):
    from accounts.models import SpendLimit
    from runs.models import Run

    settings.SKILLRUNNER_USER_MAX_TOKENS_PER_DAY = 40
    install_skill("haiku-writer")
    real_engine("codex")
    first = Run.objects.get(pk=_create(api, "codex").json()["request_id"])
    assert first.error["code"] == "BUDGET_EXCEEDED" and first.error["which"] == "user_day", first.error

    refused = _create(api, "codex")
    assert refused.status_code == 429
    detail = refused.json()["detail"]
    assert detail["code"] == "BUDGET_EXCEEDED" and detail["which"] == "user_day"
    assert detail["limit"] == 40 and detail["used"] == first.model_tokens

    # An admin raises this user's own limit: admitted, and the run finishes within it.
    SpendLimit.objects.create(user=alice, max_tokens_per_day=1_000_000)
    admitted = _create(api, "codex")
    assert admitted.status_code == 200, admitted.content
    third = Run.objects.get(pk=admitted.json()["request_id"])
    assert third.status == "succeeded", third.error
