"""Data migrations carry what the database held at the upgrade."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)


def _migrate(*targets: tuple[str, str]):
    """The project's state at `targets` (applied), as historical models."""
    executor = MigrationExecutor(connection)
    executor.migrate(list(targets))
    executor.loader.build_graph()
    return executor.loader.project_state(list(targets)).apps


def _migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def _run(Run, owner, **overrides):
    """A run of `owner`'s through the historical model `Run`: a codex auto run, but for `overrides`."""
    defaults = {"engine": "codex", "execution_mode": "auto", "interactive_profile": "resumable", "input": {}}
    return Run.objects.create(owner=owner, **(defaults | overrides))


@pytest.fixture(autouse=True)
def latest_afterwards(transactional_db):
    """Whatever state a test goes back to, the tests after it find every app's latest."""
    yield
    _migrate_to_latest()


def test_the_queue_length_is_counted_at_the_upgrade_R_SC1(django_user_model):
    before = _migrate(("runs", "0013_status_labels"))
    User, Run, OwnerQueue = (
        before.get_model(*name) for name in (("auth", "User"), ("runs", "Run"), ("runs", "OwnerQueue"))
    )
    alice, bob = User.objects.create(username="alice"), User.objects.create(username="bob")
    for owner, status, awaiting_upload in [
        (alice, "queued", False),
        (alice, "queued", False),
        (alice, "queued", True),  # waits for its upload: not ready
        (alice, "succeeded", False),
        (bob, "queued", False),
    ]:
        _run(Run, owner, status=status, awaiting_upload=awaiting_upload)
    OwnerQueue.objects.create(owner=alice)
    OwnerQueue.objects.create(owner=bob)

    after = _migrate(("runs", "0014_owner_queue_length"))
    counts = dict(after.get_model("runs", "OwnerQueue").objects.values_list("owner__username", "ready_count"))
    assert counts == {"alice": 2, "bob": 1}


def test_the_webhook_rows_are_the_notifications_apps_after_the_move(django_user_model):
    """The webhook models left `runs` for `notifications` (#27) with their tables: rows written
    before the move are read through the new app's models, and a permission granted on them
    still holds, under the new app's label."""
    from django.contrib.contenttypes.models import ContentType

    from notifications.models import WebhookAttempt, WebhookDelivery

    before = _migrate(("runs", "0014_owner_queue_length"))
    User, Permission, OldContentType = (
        before.get_model(*name) for name in (("auth", "User"), ("auth", "Permission"), ("contenttypes", "ContentType"))
    )
    Run, Endpoint, Delivery, Attempt = (
        before.get_model("runs", name) for name in ("Run", "WebhookEndpoint", "WebhookDelivery", "WebhookAttempt")
    )
    alice = User.objects.create(username="alice")
    run = _run(Run, alice, status="succeeded")
    endpoint = Endpoint.objects.create(
        owner=alice, run=run, url="https://hooks.example/run", events=["run.succeeded"], secret="whsec_before"
    )
    sent_at = timezone.now()
    delivery = Delivery.objects.create(
        endpoint=endpoint,
        run=run,
        event="run.succeeded",
        payload={"event": "run.succeeded"},
        state="delivered",
        attempt_count=1,
        next_attempt_at=sent_at,
        delivered_at=sent_at,
        last_status_code=204,
    )
    Attempt.objects.create(delivery=delivery, number=1, started_at=sent_at, duration_ms=12, status_code=204)
    content_type, _ = OldContentType.objects.get_or_create(app_label="runs", model="webhookdelivery")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename="change_webhookdelivery", defaults={"name": "Can change webhook delivery"}
    )
    alice.user_permissions.add(permission)

    _migrate_to_latest()
    moved = WebhookDelivery.objects.select_related("endpoint", "run").get()
    assert (moved.pk, moved.delivery_id, moved.state, moved.last_status_code) == (
        delivery.pk,
        delivery.delivery_id,
        "delivered",
        204,
    )
    assert (moved.endpoint.url, moved.endpoint.secret, moved.run.pk) == (endpoint.url, "whsec_before", run.pk)
    assert [(a.number, a.status_code, a.duration_ms) for a in moved.attempts.all()] == [(1, 204, 12)]
    later = WebhookAttempt.objects.create(delivery=moved, number=2, started_at=sent_at, duration_ms=1)
    assert later.pk > moved.attempts.get(number=1).pk  # the table's own id sequence goes on
    ContentType.objects.clear_cache()
    assert ContentType.objects.get_for_model(WebhookDelivery).pk == content_type.pk
    assert not ContentType.objects.filter(app_label="runs", model__startswith="webhook").exists()
    assert django_user_model.objects.get(username="alice").has_perm("notifications.change_webhookdelivery")


def test_questions_already_emailed_stay_emailed_in_the_outbox():
    """Question emails became an outbox (notifications 0004): a question marked emailed before
    the upgrade has a sent row at the time of its mark, and is not emailed again; one not yet
    marked gets no row (the supervisor writes it if the question is still open)."""
    from notifications.models import QuestionEmail

    before_the_outbox = [("notifications", "0003_webhook_deleted_at"), ("runs", "0018_worker_draining")]
    before = _migrate(*before_the_outbox)
    User, Run, Interaction = (
        before.get_model(*name) for name in (("auth", "User"), ("runs", "Run"), ("runs", "Interaction"))
    )
    alice = User.objects.create(username="alice", email="alice@example.org")
    run = _run(Run, alice, status="waiting_user", execution_mode="interactive", pending_interaction_id=2)
    emailed_at = timezone.now() - timedelta(hours=1)
    common = {"run": run, "attempt_number": 1, "prompt": "Which city?", "payload": {}}
    emailed = Interaction.objects.create(interaction_id=1, emailed_at=emailed_at, answered_at=emailed_at, **common)
    Interaction.objects.create(interaction_id=2, **common)

    _migrate_to_latest()
    (row,) = QuestionEmail.objects.all()
    assert (row.interaction_id, row.state, row.sent_at) == (emailed.pk, "sent", emailed_at)
    _migrate(*before_the_outbox)  # and back: the mark is where it was
    assert Interaction.objects.get(pk=emailed.pk).emailed_at == emailed_at
    _migrate_to_latest()
    assert QuestionEmail.objects.get().state == "sent"


def test_the_metrics_counters_start_from_the_runs_stored_R_OP11():
    """How runs ended, relay tokens and refusals became counters (metrics 0002): at the upgrade
    they hold what the stored runs did, as the scrape counted it from them before, and go on from
    there."""
    from metrics.models import ModelTokens, RelayRefusals, RunEnds
    from runs.services import fail_run

    before = _migrate(("metrics", "0001_initial"))
    User, Run, RunEvent = (
        before.get_model(*name) for name in (("auth", "User"), ("runs", "Run"), ("runs", "RunEvent"))
    )
    alice = User.objects.create(username="alice")
    for engine, status, error, tokens in [
        ("codex", "failed", {"code": "ENGINE_FAILED", "message": "exit 3"}, 100),
        ("claude", "failed", {"code": "ENGINE_FAILED", "message": "exit 1"}, 0),
        ("codex", "failed", {"code": "TIMEOUT", "message": "hard timeout"}, 0),
        ("codex", "failed", {"message": "no code"}, 0),
        ("codex", "failed", None, 0),
        ("codex", "succeeded", None, 2_000),
        ("claude", "canceled", {"code": "CANCELED_BY_USER", "message": "canceled"}, 50),
    ]:
        run = _run(Run, alice, engine=engine, status=status, error=error, model_tokens=tokens)
        relay = {"source": "relay", "reason": "key_in_request", "method": "POST", "path": "/v1/x"}
        RunEvent.objects.create(run=run, seq=1, kind="security", payload=relay)
        RunEvent.objects.create(run=run, seq=2, kind="security", payload={"source": "output", "reason": "PROVIDER_KEY"})
        RunEvent.objects.create(run=run, seq=3, kind="status", payload={"source": "relay", "reason": "not security"})
    RunEvent.objects.create(run=run, seq=4, kind="security", payload={**relay, "reason": "path"})
    queued = _run(Run, alice, status="queued")

    _migrate_to_latest()
    ends = {(status, code): runs for status, code, runs in RunEnds.objects.values_list("status", "code", "runs")}
    assert ends == {
        ("failed", "ENGINE_FAILED"): 2,
        ("failed", "TIMEOUT"): 1,
        ("failed", ""): 2,
        ("succeeded", ""): 1,
        ("canceled", "CANCELED_BY_USER"): 1,
    }
    assert dict(ModelTokens.objects.values_list("engine", "tokens")) == {"codex": 2_100, "claude": 50}
    refusals = {
        (engine, reason): count
        for engine, reason, count in RelayRefusals.objects.values_list("engine", "reason", "refusals")
    }
    assert refusals == {("codex", "key_in_request"): 5, ("claude", "key_in_request"): 2, ("claude", "path"): 1}
    fail_run(queued.pk, "TIMEOUT", "later")  # counted as it happens, from the figures carried over
    assert RunEnds.objects.get(status="failed", code="TIMEOUT").runs == 2


def test_the_outbox_ends_start_from_the_rows_stored_R_OP11():
    """How deliveries and emails ended became counters (notifications 0006): at the upgrade they
    hold the stored rows that had ended, by state, as the scrape counted them before; the rows
    still pending are counted as they stand, not here."""
    from notifications.models import OutboxEnds, WebhookDelivery
    from notifications.outbox import count_ends

    before = _migrate(("notifications", "0005_delivery_tests_and_attempt_details"))
    User, Run, Interaction = (
        before.get_model(*name) for name in (("auth", "User"), ("runs", "Run"), ("runs", "Interaction"))
    )
    Endpoint, Delivery, Email = (
        before.get_model("notifications", name) for name in ("WebhookEndpoint", "WebhookDelivery", "QuestionEmail")
    )
    alice = User.objects.create(username="alice")
    run = _run(Run, alice, status="succeeded")
    endpoint = Endpoint.objects.create(owner=alice, url="https://hooks.example/", events=[], secret="s")
    now = timezone.now()
    for state in ["delivered", "delivered", "failed", "pending"]:
        Delivery.objects.create(endpoint=endpoint, event="run.succeeded", payload={}, next_attempt_at=now, state=state)
    for number, state in enumerate(["sent", "skipped", "skipped", "pending"], start=1):
        question = Interaction.objects.create(run=run, interaction_id=number, attempt_number=1, prompt="?", payload={})
        Email.objects.create(interaction=question, next_attempt_at=now, state=state)

    _migrate_to_latest()
    ends = {
        (outbox, state): items for outbox, state, items in OutboxEnds.objects.values_list("outbox", "state", "items")
    }
    assert ends == {
        ("webhook", "delivered"): 2,
        ("webhook", "failed"): 1,
        ("email", "sent"): 1,
        ("email", "skipped"): 2,
    }
    count_ends(WebhookDelivery, "failed")  # counted as it happens, from the figures carried over
    assert OutboxEnds.objects.get(outbox="webhook", state="failed").items == 2
