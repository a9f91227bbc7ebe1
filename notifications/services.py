"""Webhook endpoints and deliveries (R-NT1): registration, the outbox rows written with each run
event, and sending them with retries.

A delivery is sent by the worker cluster: enqueued when the transaction that wrote it commits,
and offered again by the supervisor tick when it is due for a retry or its sender died.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import lock_user
from kernel.compiled import PreparedQuery
from kernel.errors import NotFound, OverUserLimit
from kernel.links import run_page_url
from kernel.lookups import with_id
from runs.models import Run, RunStatus

from . import destinations, outbox, transport
from .models import ALL_EVENTS, TEST_EVENT, WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent
from .signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, new_secret, signature
from .task_queue import enqueue_delivery

logger = logging.getLogger(__name__)

EVENT_FOR_STATUS: dict[str, str] = {
    RunStatus.WAITING_USER: WebhookEvent.WAITING_USER,
    RunStatus.SUCCEEDED: WebhookEvent.SUCCEEDED,
    RunStatus.FAILED: WebhookEvent.FAILED,
    RunStatus.CANCELED: WebhookEvent.CANCELED,
}

# --- endpoints -----------------------------------------------------------------------------------


@transaction.atomic
def register_endpoint(*, owner, url: str, events: list[str]) -> WebhookEndpoint:
    """R-NT1/R-NT2: the URL must resolve to public addresses only (unless allowed by settings);
    at most SKILLRUNNER_USER_MAX_WEBHOOKS per user (R-FS2)."""
    destinations.check(url)
    lock_user(owner)
    limit = settings.SKILLRUNNER_USER_MAX_WEBHOOKS
    if endpoints_of(owner).count() >= limit:
        raise OverUserLimit("TOO_MANY_WEBHOOKS", f"{limit} webhooks", "delete one and try again", limit=limit)
    return WebhookEndpoint.objects.create(owner=owner, url=url, events=events, secret=new_secret())


def register_callback(run: Run, url: str) -> WebhookEndpoint:
    """A run's `callback_url`: all four events of that run only. Its URL was checked at admission;
    call in the transaction that creates the run, after its first status."""
    endpoint = WebhookEndpoint.objects.create(
        owner_id=run.owner_id, run=run, url=url, events=ALL_EVENTS, secret=new_secret()
    )
    if run.is_terminal:  # born finished from the result cache, before its callback existed
        _record(run, [endpoint])
    return endpoint


# What a delivery still waiting says once its webhook is deleted: it is never sent.
ENDPOINT_DELETED = "not sent: the webhook was deleted"


@transaction.atomic
def delete_endpoint(owner, endpoint_id: Any) -> None:
    """The webhook receives nothing more, and what waited to be sent is not; its deliveries stay
    listed with their answers (the owner's history of what was sent where)."""
    endpoint = with_id(endpoints_of(owner), endpoint_id).select_for_update().first()
    if endpoint is None:
        raise NotFound("WEBHOOK_NOT_FOUND", f"no webhook {endpoint_id}")
    endpoint.deleted_at = timezone.now()
    endpoint.save(update_fields=["deleted_at"])
    abandoned = endpoint.deliveries.filter(state=WebhookDelivery.State.PENDING).update(
        state=WebhookDelivery.State.FAILED, last_error=ENDPOINT_DELETED
    )
    outbox.count_ends(WebhookDelivery, WebhookDelivery.State.FAILED, abandoned)


def endpoints_of(owner):
    """A user's own endpoints, not deleted; run callbacks live with their runs and are not listed."""
    return WebhookEndpoint.objects.filter(owner=owner, run__isnull=True, deleted_at__isnull=True)


def deliveries_of(owner):
    """Deliveries to a user's own endpoints, deleted ones' too, newest first."""
    return WebhookDelivery.objects.filter(endpoint__owner=owner, endpoint__run__isnull=True).order_by("-created_at")


def delivery_of(owner, delivery_id: Any) -> WebhookDelivery:
    """One delivery to an endpoint of `owner`'s, with its attempts."""
    delivery = with_id(deliveries_of(owner), delivery_id).select_related("endpoint").first()
    if delivery is None:
        raise NotFound("DELIVERY_NOT_FOUND", f"no delivery {delivery_id}")
    return delivery


@transaction.atomic
def send_test_delivery(owner, endpoint_id: Any) -> WebhookDelivery:
    """A delivery like any other through the outbox (signed, attempted, retried, listed), of the
    test event and marked as a test, so the owner sees what their receiver gets and answers."""
    endpoint = with_id(endpoints_of(owner), endpoint_id).first()
    if endpoint is None:
        raise NotFound("WEBHOOK_NOT_FOUND", f"no webhook {endpoint_id}")
    now = timezone.now()
    delivery = WebhookDelivery(endpoint=endpoint, event=TEST_EVENT, is_test=True, next_attempt_at=now)
    delivery.payload = {
        "event": TEST_EVENT,
        "delivery_id": str(delivery.delivery_id),
        "test": True,
        "ts": now.isoformat(),
    }
    delivery.save()
    transaction.on_commit(functools.partial(offer, delivery.pk))
    return delivery


def redeliver_own(owner, delivery_id: Any) -> int:
    """Send one delivery to a (not deleted) endpoint of `owner`'s again, as the admin's action does."""
    delivery = with_id(deliveries_of(owner).filter(endpoint__deleted_at__isnull=True), delivery_id)
    if not delivery.exists():
        raise NotFound("DELIVERY_NOT_FOUND", f"no delivery {delivery_id}")
    return redeliver(delivery)


# --- the outbox ----------------------------------------------------------------------------------


def _payload(run: Run, event: str, delivery_id: str, ts: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "event": event,
        "delivery_id": delivery_id,
        "request_id": str(run.pk),
        "run_url": run_page_url(run.pk),
        "status": run.status,
        "ts": ts,
    }
    if event == WebhookEvent.WAITING_USER:
        pending = (
            run.interactions.filter(interaction_id=run.pending_interaction_id).first()
            if run.pending_interaction_id is not None
            else None
        )
        payload["pending"] = pending.payload if pending else None
    else:
        result = run.result or {}
        payload["result"] = {key: result.get(key) for key in ("status", "error", "repair_level", "artifacts")}
    return payload


def record_status_change(run: Run) -> list[WebhookDelivery]:
    """Write the deliveries `run`'s new status triggers; call inside the transaction that changes
    it. They are handed to the cluster once (and only if) that transaction commits."""
    if run.status not in EVENT_FOR_STATUS:
        return []
    return _record(run, _ENDPOINTS_OF_RUN.instances(run.owner_id, run.pk))


# Read at every run's end: compiled once per process (kernel.compiled).
_ENDPOINTS_OF_RUN = PreparedQuery(
    lambda owner_id, run_id: WebhookEndpoint.objects.filter(
        Q(owner_id=owner_id, run__isnull=True, deleted_at__isnull=True) | Q(run_id=run_id)
    ),
    WebhookEndpoint._meta.get_field("owner"),
    WebhookEndpoint._meta.get_field("run"),
)


def _record(run: Run, endpoints) -> list[WebhookDelivery]:
    event = EVENT_FOR_STATUS[run.status]
    now = timezone.now()
    deliveries = []
    for endpoint in endpoints:
        if event not in endpoint.events:
            continue
        delivery = WebhookDelivery(endpoint=endpoint, run=run, event=event, next_attempt_at=now)
        delivery.payload = _payload(run, event, str(delivery.delivery_id), now.isoformat())
        deliveries.append(delivery)
    WebhookDelivery.objects.bulk_create(deliveries)
    for delivery in deliveries:
        transaction.on_commit(functools.partial(offer, delivery.pk))
    return deliveries


def offer(delivery_pk: int) -> None:
    """Hand a delivery to the cluster; if the broker is away, the supervisor offers it later."""
    try:
        enqueue_delivery(delivery_pk)
    except Exception:
        logger.warning("could not enqueue webhook delivery %s; the supervisor will retry", delivery_pk, exc_info=True)


def deliveries_pending() -> bool:
    """Whether a delivery waits to be sent: the supervisor keeps ticking for it."""
    return WebhookDelivery.objects.filter(state=WebhookDelivery.State.PENDING).exists()


def offer_due_deliveries(limit: int = 200) -> int:
    """Supervisor tick: pending deliveries due for a (re)try and not held by a live sender."""
    due = outbox.due(WebhookDelivery.objects.all(), limit)
    for pk in due:
        offer(pk)  # each delivery is enqueued at most once per re-offer window by this process
    return len(due)


# --- sending -------------------------------------------------------------------------------------


def _timeout() -> float:
    return settings.SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS


# What an attempt says until its sender records the answer: if the sender dies, it stays so.
UNFINISHED_ATTEMPT = "no answer recorded: the sender stopped (worker died or was killed) during the attempt"


def _claim(delivery_pk: int) -> tuple[WebhookDelivery, WebhookAttempt] | None:
    """Lease a due delivery and log its attempt as started, in one transaction."""
    with transaction.atomic():
        rows = WebhookDelivery.objects.select_related("endpoint")
        delivery = outbox.claim(rows, delivery_pk, outbox.lease_seconds(_timeout()))
        if delivery is None:
            return None
        attempt = WebhookAttempt.objects.create(
            delivery=delivery,
            number=delivery.attempt_count,
            started_at=timezone.now(),
            duration_ms=0,
            error=UNFINISHED_ATTEMPT,
        )
    return delivery, attempt


def request_body(delivery: WebhookDelivery) -> bytes:
    """The body every attempt of `delivery` sends."""
    return json.dumps(delivery.payload, separators=(",", ":")).encode()


def _send(delivery: WebhookDelivery, headers: dict[str, str]) -> transport.Answer:
    try:
        destination = destinations.check(delivery.endpoint.url)
    except destinations.DestinationError as exc:
        return transport.Answer(None, f"{exc.code}: {exc.message}", 0)
    return transport.post(destination, request_body(delivery), headers, _timeout())


def _headers(delivery: WebhookDelivery) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "SkillRunner-Webhook/1",
        SIGNATURE_HEADER: signature(delivery.endpoint.secret, request_body(delivery)),
        EVENT_HEADER: delivery.event,
        DELIVERY_HEADER: str(delivery.delivery_id),
    }


def attempt_delivery(delivery_pk: int) -> WebhookDelivery | None:
    """One attempt of a due delivery, recorded; None when it is not due or another sender has it.

    Network errors, timeouts and 5xx are retried on the schedule; any other answer is final
    (a 4xx will not change by sending the same body again).
    """
    claimed = _claim(delivery_pk)
    if claimed is None:
        return None
    delivery, attempt = claimed
    headers = _headers(delivery)
    answer = _send(delivery, headers)
    with transaction.atomic():
        attempt.duration_ms = answer.duration_ms
        attempt.status_code = answer.status_code
        attempt.error = answer.error
        attempt.request_headers = headers
        attempt.response_excerpt = answer.body_excerpt
        attempt.save(update_fields=["duration_ms", "status_code", "error", "request_headers", "response_excerpt"])
        delivery.last_status_code = answer.status_code
        delivery.last_error = answer.error
        if answer.ok:
            delivery.state = WebhookDelivery.State.DELIVERED
            delivery.delivered_at = timezone.now()
        elif answer.status_code is None or answer.status_code >= 500:
            unit = settings.SKILLRUNNER_WEBHOOK_RETRY_BASE_SECONDS
            outbox.retry_or_give_up(delivery, unit, give_up=WebhookDelivery.State.FAILED)
        else:
            delivery.state = WebhookDelivery.State.FAILED
        outbox.save_attempt(delivery)
    return delivery


def redeliver(deliveries) -> int:
    """Admin action: send these again now, as new attempts of the same delivery (same id)."""
    pks = list(deliveries.values_list("pk", flat=True))
    WebhookDelivery.objects.filter(pk__in=pks).update(
        state=WebhookDelivery.State.PENDING, next_attempt_at=timezone.now(), leased_until=None
    )
    for pk in pks:
        transaction.on_commit(functools.partial(offer, pk))
    return len(pks)
