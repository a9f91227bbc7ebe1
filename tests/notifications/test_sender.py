"""Sender threads (R-NT1): the cluster task hands each attempt to a thread of the worker process,
so a receiver that hangs holds neither the worker nor the other deliveries."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from notifications.services import attempt_delivery
from tests.support.service_processes import wait_until
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def threaded(settings, allow_private):
    """The sender as a live cluster runs it (not inline), with a short attempt timeout."""
    from notifications import sender as module

    settings.SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS = 5.0
    fresh = module._Sender()
    yield fresh
    if fresh._pool is not None:
        fresh._pool.shutdown(wait=True)


def _delivery(owner, url):
    from notifications import services
    from notifications.models import WebhookDelivery

    endpoint = services.register_endpoint(owner=owner, url=url, events=["run.failed"])
    return WebhookDelivery.objects.create(
        endpoint=endpoint, event="run.failed", payload={"event": "run.failed"}, next_attempt_at=timezone.now()
    )


def test_a_hanging_receiver_does_not_hold_the_task_or_other_deliveries(alice, threaded):
    from notifications.models import WebhookDelivery

    with WebhookReceiver(answers=["hang"]) as slow, WebhookReceiver(answers=[200]) as fast:
        stuck, other = _delivery(alice, slow.url), _delivery(alice, fast.url)
        started = time.monotonic()
        assert threaded.submit(attempt_delivery, stuck.pk) and threaded.submit(attempt_delivery, other.pk)
        assert time.monotonic() - started < 0.5  # the task returned at once
        wait_until(lambda: WebhookDelivery.objects.get(pk=other.pk).state == "delivered", 10, "the other delivery")
        # The hanging attempt may reach its receiver after the other was delivered (its thread
        # connects in its own time); it hangs until released, so the other never waited for it.
        wait_until(lambda: slow.received, 10, "the hanging attempt to reach its receiver")
        assert len(slow.received) == 1 and WebhookDelivery.objects.get(pk=stuck.pk).state == "pending"
        slow.release()
        wait_until(lambda: WebhookDelivery.objects.get(pk=stuck.pk).state == "delivered", 10, "the released one")


def test_a_saturated_sender_leaves_the_delivery_due(alice, threaded, monkeypatch):
    from notifications import sender as module
    from notifications.models import WebhookDelivery

    monkeypatch.setattr(module, "SENDER_THREADS", 1)
    with WebhookReceiver(answers=["hang", 200]) as receiver:
        first, second = _delivery(alice, receiver.url), _delivery(alice, receiver.url)
        assert threaded.submit(attempt_delivery, first.pk)
        wait_until(lambda: receiver.received, 10, "the first attempt to be in flight")
        assert threaded.submit(attempt_delivery, second.pk) is False  # every thread busy: not taken
        second.refresh_from_db()
        assert second.state == "pending" and second.attempt_count == 0 and second.leased_until is None
        receiver.release()
        wait_until(lambda: WebhookDelivery.objects.get(pk=first.pk).state == "delivered", 10, "the first delivery")
        wait_until(lambda: threaded.submit(attempt_delivery, second.pk), 10, "a free sender thread")
        wait_until(lambda: WebhookDelivery.objects.get(pk=second.pk).state == "delivered", 10, "the second delivery")
