"""The figures counted as they happen (metrics.receivers, notifications.outbox.count_ends): how
runs ended as each moves to its last status, the relay's tokens and refusals as they are recorded,
how webhook deliveries and question emails ended; each in the transaction that records it, and
kept when the rows go. A scrape reads those few rows and the service as it stands, in a pinned
number of statements whose plans do not grow with the runs, events, deliveries and emails stored."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from engines.relay import RelayRefusal
from notifications.email import attempt_question_email
from notifications.models import QuestionEmail, WebhookDelivery, WebhookEndpoint
from notifications.services import ENDPOINT_DELETED, attempt_delivery, delete_endpoint, redeliver
from notifications.transport import Answer
from runs.models import Interaction, Run, RunEvent, RunStatus, TurnUsage
from runs.services import cancel_run, fail_run, record_relay_activity
from runs.services.lifecycle import end_without_output, locked
from tests.metrics.test_metrics import scrape, value
from tests.support.jobs import create_job
from tests.support.service_processes import free_port
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

TABLE = re.compile(r'\bFROM "(\w+)"|\bJOIN "(\w+)"')
# A scrape's statements: the request's token (with its user), then metrics.collector's two.
SCRAPE_STATEMENTS = 3
# Tables read whole, each a row per label (metrics.models, notifications.models.OutboxEnds), and
# partial indexes scanned whole, each bounded by what is under way; anything else is read through
# an index's range (SQLite's plan says SEARCH).
COUNTER_TABLES = {
    "metrics_runends",
    "metrics_turndurations",
    "metrics_modeltokens",
    "metrics_relayrefusals",
    "notifications_outboxends",
}
BOUNDED_INDEXES = {
    "runs_run_slot_holders": "the runs holding a slot",
    "runs_ownerqueue_turn_order": "the places of owners with a ready run",
}
# After this many attempts the retry schedule is over: the next failure gives up.
PAST_THE_SCHEDULE = 30


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


def states(scraped, name: str) -> dict[str, float]:
    return {sample.labels["state"]: sample.value for sample in scraped[name][2]}


def delivery_to(endpoint: WebhookEndpoint, **fields: Any) -> WebhookDelivery:
    return WebhookDelivery.objects.create(
        endpoint=endpoint, event="run.succeeded", payload={}, next_attempt_at=timezone.now(), **fields
    )


def test_deliveries_are_counted_as_they_end_and_outlive_their_rows(alice, staff_api, settings, monkeypatch):
    """Pending deliveries as they stand; delivered and failed (a final answer, the schedule over,
    the webhook deleted) counted as each ends, again when one is sent again by hand."""
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = True
    monkeypatch.setattr("notifications.services.offer", lambda pk: None)  # this test attempts each itself
    with WebhookReceiver(answers=[200, 410, 500, 500, 200]) as receiver:
        kept, deleted = (
            WebhookEndpoint.objects.create(owner=alice, url=receiver.url, events=["run.succeeded"], secret="s")
            for _ in range(2)
        )
        delivered, refused, given_up, retried = (delivery_to(kept) for _ in range(4))
        WebhookDelivery.objects.filter(pk=given_up.pk).update(attempt_count=PAST_THE_SCHEDULE)
        for delivery in (delivered, refused, given_up, retried):
            attempt_delivery(delivery.pk)
        delivery_to(deleted), delivery_to(deleted)
        delete_endpoint(alice, deleted.pk)
        counted = {"pending": 1, "delivered": 1, "failed": 4}
        assert states(scrape(staff_api), "skillrunner_webhook_deliveries") == counted
        assert WebhookDelivery.objects.get(pk=retried.pk).state == "pending"  # due again later

        redeliver(WebhookDelivery.objects.filter(pk=delivered.pk))
        assert states(scrape(staff_api), "skillrunner_webhook_deliveries") == {**counted, "pending": 2}
        attempt_delivery(delivered.pk)
        assert len(receiver.received) == 5
    counted = {**counted, "delivered": 2}  # its second end counted too
    assert states(scrape(staff_api), "skillrunner_webhook_deliveries") == counted

    WebhookEndpoint.objects.all().delete()  # their deliveries go with them
    assert states(scrape(staff_api), "skillrunner_webhook_deliveries") == {**counted, "pending": 0}


def test_a_delivery_ended_while_it_is_sent_keeps_its_first_end_counted_once(alice, staff_api, monkeypatch):
    """Its webhook deleted while a sender sends it: the deletion's end (failed) stands and is the
    one counted; the sender's answer is kept in its attempt only."""
    endpoint = WebhookEndpoint.objects.create(owner=alice, url="https://example.org/hook", events=[], secret="s")
    delivery = delivery_to(endpoint)

    def deleted_while_sending(delivery: WebhookDelivery, headers: dict[str, str]) -> Answer:
        delete_endpoint(alice, endpoint.pk)
        return Answer(200, "", 1)

    monkeypatch.setattr("notifications.services._send", deleted_while_sending)
    attempt_delivery(delivery.pk)
    assert states(scrape(staff_api), "skillrunner_webhook_deliveries") == {"pending": 0, "delivered": 0, "failed": 1}
    delivery.refresh_from_db()
    assert (delivery.state, delivery.last_error) == ("failed", ENDPOINT_DELETED)
    assert [attempt.status_code for attempt in delivery.attempts.all()] == [200]


def open_question(run_id: str) -> QuestionEmail:
    """`run_id` waiting for its owner's answer to a question, and the question's email row, due."""
    Run.objects.filter(pk=run_id).update(status=RunStatus.WAITING_USER, pending_interaction_id=1)
    question = Interaction.objects.create(run_id=run_id, interaction_id=1, attempt_number=1, prompt="?", payload={})
    return QuestionEmail.objects.create(interaction=question, next_attempt_at=timezone.now() - timedelta(seconds=1))


def test_question_emails_are_counted_as_they_end_and_outlive_their_rows(alice, queued_runs, staff_api, settings):
    """Pending emails as they stand; sent, skipped (answered first) and failed (the schedule over)
    counted as each ends; an attempt rolled back counts nothing."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alice.email = "alice@example.org"
    alice.save()
    sent, answered, failing, waiting, rolled_back = (open_question(rid) for rid in queued_runs(5))
    Interaction.objects.filter(pk=answered.interaction_id).update(answered_at=timezone.now())
    assert attempt_question_email(sent.pk).state == "sent"
    assert attempt_question_email(answered.pk).state == "skipped"
    with pytest.raises(RuntimeError), transaction.atomic():
        assert attempt_question_email(rolled_back.pk).state == "sent"
        raise RuntimeError("the change fails after the email went out")
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens
    QuestionEmail.objects.filter(pk=failing.pk).update(attempt_count=PAST_THE_SCHEDULE)
    assert attempt_question_email(failing.pk).state == "failed"

    counted = {"sent": 1, "skipped": 1, "failed": 1}
    assert states(scrape(staff_api), "skillrunner_question_emails") == {"pending": 2, **counted}
    assert QuestionEmail.objects.get(pk=waiting.pk).state == QuestionEmail.objects.get(pk=rolled_back.pk).state

    Run.objects.all().delete()  # retention with SKILLRUNNER_RUN_RETENTION_DELETE_ROWS: questions, emails go
    assert not QuestionEmail.objects.exists()
    assert states(scrape(staff_api), "skillrunner_question_emails") == {"pending": 0, **counted}


def add_stored_runs(owner, count: int, *, events_each: int = 10) -> None:
    """`count` finished runs written in bulk with their turns and events (a few of them the relay's
    refusals), each run's webhook delivery (some still pending) and a question email for every
    other run: what a service that ran them keeps, without counting anything."""
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
    endpoint = WebhookEndpoint.objects.create(owner=owner, url="https://hooks.example/", events=[], secret="s")
    now = timezone.now()
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(endpoint=endpoint, run=run, event="run.succeeded", payload={}, next_attempt_at=now, state=state)
        for n, run in enumerate(runs)
        for state in [("delivered", "failed", "pending")[n % 3]]
    )
    questions = Interaction.objects.bulk_create(
        Interaction(run=run, interaction_id=1, attempt_number=1, prompt="?", payload={}, answered_at=now)
        for run in runs[::2]
    )
    QuestionEmail.objects.bulk_create(
        QuestionEmail(interaction=question, next_attempt_at=now, state=("sent", "skipped", "pending")[n % 3])
        for n, question in enumerate(questions)
    )


Statement = tuple[str, Any]


def scrape_statements(client) -> list[Statement]:
    """The statements a scrape runs, with their parameters."""
    statements: list[Statement] = []

    def record(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        scrape(client)
    return statements


def tables_read(statements: list[Statement]) -> set[str]:
    return {name for sql, _ in statements for match in TABLE.findall(sql) for name in match if name}


def unbounded_reads(statements: list[Statement]) -> list[str]:
    """The steps of SQLite's plans for `statements` that read a table or an index whole, but for
    the counter tables and the partial indexes of what is under way."""
    steps = []
    with connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            steps += [row[-1] for row in cursor.fetchall()]
    whole = re.compile(r"^SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?")
    return [
        step
        for step in steps
        if (read := whole.match(step)) and read[1] not in COUNTER_TABLES and read[2] not in BOUNDED_INDEXES
    ]


def test_a_scrape_is_three_statements_none_growing_with_the_rows_stored_R_OP11(alice, queued_runs, staff_api):
    """With every family given rows (the counters made), a scrape beside a few runs and one beside
    many more runs, turns, events, deliveries and emails runs the same statements, SCRAPE_STATEMENTS
    of them; none reads the events or the turns, and every other table but the counters' through
    a WHERE, which on SQLite is an index's range (or a small partial index): never all the runs,
    deliveries or emails stored."""
    failing, spender, _ = queued_runs(3)
    fail_run(failing, "ENGINE_FAILED", "exit 3")
    record_relay_activity(spender, 1, 10, [refusal("path")])
    scrape(staff_api)  # the first request's one-off statements (sessions, content types) aside

    few = scrape_statements(staff_api)
    add_stored_runs(alice, 300)
    many = scrape_statements(staff_api)

    assert len(few) == len(many) == SCRAPE_STATEMENTS
    assert not {"runs_runevent", "runs_turnusage"} & tables_read(many)
    assert all(" WHERE " in sql for sql, params in many if tables_read([(sql, params)]) - COUNTER_TABLES)
    if connection.vendor == "sqlite":  # PostgreSQL's planner may read a small table whole, index or not
        assert unbounded_reads(many) == []
