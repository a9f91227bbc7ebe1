"""The webhook admin (R-NT1): endpoints without their secrets, the delivery log with attempts,
filters, and the "redeliver" action."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff_client(client, admin_user):
    client.force_login(admin_user)
    return client


def test_endpoint_pages_never_show_the_secret(staff_client, alice, allow_private):
    from notifications import services

    endpoint = services.register_endpoint(owner=alice, url="http://127.0.0.1:9/hook", events=["run.failed"])
    listing = staff_client.get("/admin/notifications/webhookendpoint/")
    page = staff_client.get(f"/admin/notifications/webhookendpoint/{endpoint.pk}/change/")
    assert listing.status_code == page.status_code == 200
    assert "127.0.0.1:9/hook" in listing.content.decode()
    assert endpoint.secret not in listing.content.decode() + page.content.decode()
    assert (
        staff_client.post(f"/admin/notifications/webhookendpoint/{endpoint.pk}/delete/", {"post": "yes"}).status_code
        == 302
    )
    assert not type(endpoint).objects.exists()


def test_delivery_log_filters_attempts_and_redeliver(staff_client, alice, receiver):
    from notifications import services
    from notifications.models import WebhookDelivery

    receiver.answers = [500, 200]
    endpoint = services.register_endpoint(owner=alice, url=receiver.url, events=["run.failed"])
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event="run.failed", payload={"event": "run.failed"}, next_attempt_at=timezone.now()
    )
    services.attempt_delivery(delivery.pk)
    pending = staff_client.get("/admin/notifications/webhookdelivery/?state__exact=pending&last_status_code=500")
    assert str(delivery.delivery_id) in pending.content.decode()
    assert (
        str(delivery.delivery_id)
        not in staff_client.get("/admin/notifications/webhookdelivery/?state__exact=delivered").content.decode()
    )
    detail = staff_client.get(f"/admin/notifications/webhookdelivery/{delivery.pk}/change/").content.decode()
    assert 'id="attempts-heading"' in detail
    assert re.search(r'class="field-status_code">\s*<p>500</p>', detail), "the attempt's status code is listed"

    answer = staff_client.post(
        "/admin/notifications/webhookdelivery/", {"action": "redeliver", "_selected_action": [delivery.pk]}, follow=True
    )
    assert answer.status_code == 200
    delivery.refresh_from_db()
    assert delivery.state == "delivered" and delivery.attempt_count == 2
    assert len({item.headers["X-SkillRunner-Delivery"] for item in receiver.received}) == 1
