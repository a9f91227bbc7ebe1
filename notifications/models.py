"""Webhook endpoints and the delivery log (R-NT1), and question emails (R-NT3): two outboxes.

A delivery row is written in the same transaction as the run event it announces, so an event
that is committed always has its deliveries, and a worker that dies mid-send only delays them:
the row stays pending and is sent again (at least once, same `delivery_id`). A question email
is a row of its own once the question outlives the grace period, sent the same way (`outbox.py`).
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.conf import settings
from django.db import models


class WebhookEvent(models.TextChoices):
    WAITING_USER = "run.waiting_user"
    SUCCEEDED = "run.succeeded"
    FAILED = "run.failed"
    CANCELED = "run.canceled"


ALL_EVENTS = [event.value for event in WebhookEvent]
# The event of a test delivery the owner asked for from the settings page: no run, no subscription.
TEST_EVENT = "webhook.test"


class WebhookEndpoint(models.Model):
    """A destination for a user's run events; with `run` set, the `callback_url` of that one run."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints")
    run = models.ForeignKey(
        "runs.Run",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="callback_endpoints",
        help_text="set for a run's callback_url, which receives all events of that run only",
    )
    url = models.URLField(max_length=2048)
    events = models.JSONField(default=list)
    # Kept as is because signing needs it; the API shows it once, the admin never.
    secret = models.CharField(max_length=128, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # Deleted by its owner: it receives nothing more, and its deliveries stay in their history.
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runs_webhookendpoint"  # created when this app was part of runs
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.url


PENDING = "pending"  # the state of every outbox row still to be sent (outbox.py)


class OutboxItem(models.Model):
    """What a sender needs of a row to lease it, retry it and see a dead sender's lease lapse."""

    attempt_count = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(db_index=True)
    # A sender holds the row until then; past it, a sender that died is presumed gone.
    leased_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    state: str  # each outbox's own choices, PENDING among them
    OUTBOX: ClassVar[str]  # its name in OutboxEnds

    class Meta:
        abstract = True


class WebhookDelivery(OutboxItem):
    OUTBOX = "webhook"

    class State(models.TextChoices):
        PENDING = PENDING
        DELIVERED = "delivered"
        FAILED = "failed"  # every retry of the schedule failed

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    event = models.CharField(max_length=32, choices=WebhookEvent.choices, db_index=True)
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    payload = models.JSONField()
    is_test = models.BooleanField(default=False, help_text="sent on the owner's request to try the webhook")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runs_webhookdelivery"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} {self.delivery_id}"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    request_headers = models.JSONField(default=dict, blank=True, help_text="the headers sent")
    response_excerpt = models.TextField(blank=True, help_text="the start of the receiver's answer")

    class Meta:
        db_table = "runs_webhookattempt"
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"{self.delivery_id} #{self.number}"


class QuestionEmail(OutboxItem):
    """The email about one question (R-NT3), written once the question outlives the grace period."""

    OUTBOX = "email"

    class State(models.TextChoices):
        PENDING = PENDING
        SENT = "sent"
        SKIPPED = "skipped"  # the question was answered (or its run ended) before it went out
        FAILED = "failed"  # every retry of the schedule failed

    interaction = models.OneToOneField("runs.Interaction", on_delete=models.CASCADE, related_name="question_email")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"question email {self.interaction_id}"


class OutboxEnds(models.Model):
    """Rows of one outbox (its OUTBOX) that left pending for one state: how many ever did, counted
    in the transaction that moved them (outbox.count_ends), so GET /metrics reads a few rows
    rather than every delivery stored; only grows, whatever retention removes. A row sent again
    by hand (the admin's redeliver) is pending again, and counted again when it ends again."""

    outbox = models.CharField(max_length=16)
    state = models.CharField(max_length=16)
    items = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["outbox", "state"], name="unique_outbox_ends_state")]

    def __str__(self) -> str:
        return f"{self.outbox} {self.state}: {self.items}"
