"""The figures counted as they happen (metrics.receivers): how runs ended as each moves to its
last status, the relay's tokens and refusals as they are recorded; each in the transaction that
records it, and kept when the runs' rows go. A scrape reads those few rows: its statements do not
grow with the runs and events stored, and none reads the events or the turns."""

from __future__ import annotations

import re
import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from engines.relay import RelayRefusal
from runs.models import Run, RunEvent, RunStatus, TurnUsage
from runs.services import cancel_run, fail_run, record_relay_activity
from runs.services.lifecycle import end_without_output, locked
from tests.api.helpers import create_job
from tests.metrics.test_metrics import scrape, value

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

TABLE = re.compile(r'\bFROM "(\w+)"|\bJOIN "(\w+)"')


@pytest.fixture
def queued_runs(alice, api, install_skill, manual_dispatch):
    """A factory of alice's runs, left queued (no turn runs)."""
    install_skill("haiku-writer")

    def make(count: int) -> list[str]:
        return [
            create_job(api, runtime_options={"no_cache": True}, input={"topic": f"run {n}"})["request_id"]
            for n in range(count)
        ]

    return make


def refusal(reason: str) -> RelayRefusal:
    return RelayRefusal(reason, "POST", "/v1/responses", "refused")


def runs_by_status(scraped) -> dict[str, float]:
    return {sample.labels["status"]: sample.value for sample in scraped["skillrunner_runs"][2]}


def failed_runs(scraped) -> dict[str, float]:
    return {sample.labels["code"]: sample.value for sample in scraped["skillrunner_failed_runs"][2]}


def relay_refusals(scraped) -> dict[tuple[str, str], float]:
    samples = scraped["skillrunner_relay_refusals_total"][2]
    return {(sample.labels["engine"], sample.labels["reason"]): sample.value for sample in samples}


def test_failures_and_the_relay_are_counted_as_they_happen_and_outlive_the_runs(queued_runs, staff_api):
    first, second, third, canceled, spender = queued_runs(5)
    fail_run(first, "ORCHESTRATOR_RESTART_INTERRUPTED", "the worker stopped")
    fail_run(second, "ORCHESTRATOR_RESTART_INTERRUPTED", "the worker stopped")
    fail_run(third, "INTERACTION_WAIT_TIMEOUT", "no reply")
    assert fail_run(third, "TIMEOUT", "again") is None  # already failed: nothing to count
    cancel_run(Run.objects.get(pk=canceled))  # canceled is no failure
    record_relay_activity(spender, 1, 700, [refusal("key_in_request"), refusal("key_in_request")])
    record_relay_activity(spender, 2, 300, [refusal("path")])
    record_relay_activity(spender, 2, 0, [])  # a heartbeat with nothing new

    counted = {
        "failures": {"ORCHESTRATOR_RESTART_INTERRUPTED": 2, "INTERACTION_WAIT_TIMEOUT": 1},
        "refusals": {("codex", "key_in_request"): 2, ("codex", "path"): 1},
    }
    metrics = scrape(staff_api)
    assert failed_runs(metrics) == counted["failures"]
    assert relay_refusals(metrics) == counted["refusals"]
    assert value(metrics["skillrunner_model_tokens_total"][2], "skillrunner_model_tokens_total", engine="codex") == 1000
    # the refusals are the run's security events, as before
    assert RunEvent.objects.filter(run_id=spender, kind="security", payload__source="relay").count() == 3

    expected_runs = {"queued": 1, "running": 0, "waiting_user": 0, "succeeded": 0, "failed": 3, "canceled": 1}
    assert runs_by_status(metrics) == expected_runs

    Run.objects.all().delete()  # retention with SKILLRUNNER_RUN_RETENTION_DELETE_ROWS: the rows go
    metrics = scrape(staff_api)
    assert runs_by_status(metrics) == {**expected_runs, "queued": 0}  # the ends counted stay, only grow
    assert failed_runs(metrics) == counted["failures"]
    assert relay_refusals(metrics) == counted["refusals"]
    assert value(metrics["skillrunner_model_tokens_total"][2], "skillrunner_model_tokens_total", engine="codex") == 1000


def test_a_failure_rolled_back_is_not_counted(queued_runs, staff_api):
    (rid,) = queued_runs(1)
    with pytest.raises(RuntimeError), transaction.atomic():
        end_without_output(locked(rid), RunStatus.FAILED, "ENGINE_FAILED", "exit 3")
        raise RuntimeError("the change fails after the transition")
    assert Run.objects.get(pk=rid).status == RunStatus.QUEUED
    metrics = scrape(staff_api)
    assert failed_runs(metrics) == {}
    assert runs_by_status(metrics)["failed"] == 0


def add_stored_runs(owner, count: int, *, events_each: int = 10) -> None:
    """`count` finished runs written in bulk with their turns and events (a few of them the relay's
    refusals): what a service that ran them keeps, without counting anything."""
    template = Run.objects.filter(owner=owner).first()
    assert template is not None
    runs = Run.objects.bulk_create(
        Run(
            request_id=uuid.uuid4(),
            owner=owner,
            skill_id=template.skill_id,
            skill_version_id=template.skill_version_id,
            engine="codex",
            execution_mode="auto",
            interactive_profile="resumable",
            status=RunStatus.FAILED if n % 3 else RunStatus.SUCCEEDED,
            error={"code": f"CODE_{n % 7}", "message": "bulk"} if n % 3 else None,
            model_tokens=n,
        )
        for n in range(count)
    )
    TurnUsage.objects.bulk_create(TurnUsage(run=run, attempt_number=1, duration_ms=1_500) for run in runs)
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run, seq=seq, kind="security" if seq == 2 else "status", payload={"source": "relay", "reason": "x"}
        )
        for run in runs
        for seq in range(1, events_each + 1)
    )


def scrape_statements(client) -> list[str]:
    with CaptureQueriesContext(connection) as statements:
        scrape(client)
    return [statement["sql"] for statement in statements]


def tables_read(statements: list[str]) -> set[str]:
    return {name for sql in statements for match in TABLE.findall(sql) for name in match if name}


def test_a_scrapes_statements_do_not_grow_with_the_runs_stored_R_OP11(alice, queued_runs, staff_api):
    """With every family given rows (the counters made), a scrape beside a few runs and one beside
    many more runs, turns and events runs the same statements; none of them reads the events or
    the turns, nor every run: what grows with them is counted as it happens."""
    failing, spender, _ = queued_runs(3)
    fail_run(failing, "ENGINE_FAILED", "exit 3")
    record_relay_activity(spender, 1, 10, [refusal("path")])
    scrape(staff_api)  # the first request's one-off statements (sessions, content types) aside

    few = scrape_statements(staff_api)
    add_stored_runs(alice, 300)
    many = scrape_statements(staff_api)

    assert len(many) == len(few)
    assert not {"runs_runevent", "runs_turnusage"} & tables_read(many)
    # the runs under way, holding a slot or waiting: never all the runs stored
    assert all(" WHERE " in sql for sql in many if "runs_run" in tables_read([sql]))
