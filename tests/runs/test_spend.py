"""Spend limits' bookkeeping (R-SB9) and the relay's security events (R-SB8): what a worker
records from a turn's relay, admission against the day's budget, the runtime option, and where
a user sees their spending. The relay itself: tests/engines/test_relay.py; real CLIs:
tests/real_engines/test_budgets_real.py."""

from __future__ import annotations

import pytest
from django.db import DatabaseError
from django.test import Client
from django.utils import timezone

from accounts.models import SpendLimit
from engines.relay import RelayLedger, RelayRefusal, SpendLimits
from runs import services
from runs.models import Run, TokenSpend
from runs.spend import relay_ledger
from tests.support.jobs import create_job, haiku_step

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(api, install_skill, fake_codex) -> Run:
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    return Run.objects.get(pk=create_job(api)["request_id"])


def test_tokens_go_to_the_run_and_its_owners_day_and_refusals_become_security_events(run, api):
    refusal = RelayRefusal("RELAY_ROUTE_NOT_ALLOWED", "POST", "/v1/files", "POST /v1/files is not a model call")
    assert services.record_relay_activity(run.pk, 1, 120, [refusal]) == (120, 120)
    assert services.record_relay_activity(run.pk, 1, 30, []) == (150, 150)
    run.refresh_from_db()
    assert run.model_tokens == 150
    assert TokenSpend.objects.get(owner=run.owner, day=timezone.localdate()).tokens == 150
    events = api.get(f"/v1/jobs/{run.pk}/events/history?after_seq=0").json()["events"]
    [security] = [event for event in events if event["kind"] == "security"]
    assert security["payload"] == {
        "attempt": 1,
        "source": "relay",
        "reason": "RELAY_ROUTE_NOT_ALLOWED",
        "method": "POST",
        "path": "/v1/files",
        "message": "POST /v1/files is not a model call",
    }
    assert api.get(f"/v1/jobs/{run.pk}").json()["model_tokens"] == 150


def test_a_users_runs_share_the_day(api, install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    first, second = (Run.objects.get(pk=create_job(api)["request_id"]) for _ in range(2))
    services.record_relay_activity(first.pk, 1, 70, [])
    assert services.record_relay_activity(second.pk, 1, 5, []) == (5, 75)


def test_the_ledger_of_a_turn_starts_from_what_was_spent(run, settings):
    settings.SKILLRUNNER_RUN_MAX_TOKENS = 1000
    settings.SKILLRUNNER_USER_MAX_TOKENS_PER_DAY = 5000
    services.record_relay_activity(run.pk, 1, 400, [])
    run.refresh_from_db()
    ledger = relay_ledger(run)
    assert ledger.limits == SpendLimits(
        run_max_tokens=1000,
        user_max_tokens_per_day=5000,
        max_calls_per_minute=settings.SKILLRUNNER_RUN_MAX_MODEL_CALLS_PER_MINUTE,
    )
    ledger.charge(601)
    assert ledger.exceeded is not None and (ledger.exceeded.which, ledger.exceeded.used) == ("run", 1001)


def test_a_runs_own_max_tokens_lowers_the_operators(api, install_skill, fake_codex, settings):
    settings.SKILLRUNNER_RUN_MAX_TOKENS = 1000
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    run = Run.objects.get(pk=create_job(api, runtime_options={"max_tokens": 300})["request_id"])
    assert relay_ledger(run).limits.run_max_tokens == 300
    refused = api.post(
        "/v1/jobs",
        {
            "skill_id": "haiku-writer",
            "engine": "codex",
            "input": {"topic": "x"},
            "runtime_options": {"max_tokens": 1001},
        },
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json()["detail"]["code"] == "RUNTIME_OPTION_INVALID"
    assert "at most 1000" in refused.json()["detail"]["message"]


def test_a_user_over_the_days_budget_is_refused_at_admission(run, api, settings, alice):
    settings.SKILLRUNNER_USER_MAX_TOKENS_PER_DAY = 100
    services.record_relay_activity(run.pk, 1, 100, [])
    body = {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "again"}}
    refused = api.post("/v1/jobs", body, format="json")
    assert refused.status_code == 429
    detail = refused.json()["detail"]
    assert (detail["code"], detail["which"], detail["used"], detail["limit"]) == (
        "BUDGET_EXCEEDED",
        "user_day",
        100,
        100,
    )
    SpendLimit.objects.create(user=alice, max_tokens_per_day=0)  # an admin lifts this user's limit
    assert api.post("/v1/jobs", body, format="json").status_code == 200


def test_the_settings_page_shows_the_days_spending(run, alice, settings):
    settings.SKILLRUNNER_USER_MAX_TOKENS_PER_DAY = 50_000
    services.record_relay_activity(run.pk, 1, 1234, [])
    browser = Client()
    browser.force_login(alice)
    page = browser.get("/settings/").content.decode()
    assert 'id="spending"' in page
    assert '<dd id="spent-today">1234 tokens</dd>' in page
    assert '<dd id="daily-limit">50000 tokens</dd>' in page


def test_what_a_worker_could_not_record_is_recorded_next_time(run, monkeypatch):
    from worker.execution import ClaimControl

    ledger = RelayLedger()
    control = ClaimControl(run.pk, 1, "w", run.records_dir / "logs", ledger)
    ledger.charge(40)
    ledger.refuse(RelayRefusal("RELAY_KEY_OUTSIDE_KEY_HEADER", "GET", "/v1/x/<key>", "in the path"))

    def away(*args):
        raise DatabaseError("away")

    with monkeypatch.context() as patched:
        patched.setattr(services, "record_relay_activity", away)
        with pytest.raises(DatabaseError):
            control._record_relay(refresh=False)
    control._record_relay(refresh=False)
    run.refresh_from_db()
    assert run.model_tokens == 40
    assert run.events.filter(kind="security").count() == 1
