"""The SSRF guard (R-NT2): refused at registration and at every delivery, after DNS resolution,
and the delivery connects to the very address that was checked."""

from __future__ import annotations

import pytest

from notifications import destinations
from notifications.destinations import DestinationError
from tests.notifications.helpers import fake_dns

REFUSED_LITERALS = [
    "http://127.0.0.1/hook",
    "http://127.5.6.7:8080/hook",
    "http://10.1.2.3/hook",
    "http://172.16.0.1/hook",
    "http://172.31.255.255/hook",
    "http://192.168.1.10/hook",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
    "http://100.100.100.200/",  # shared address space (another cloud's metadata)
    "http://0.0.0.0/hook",
    "http://224.0.0.1/hook",
    "http://[::1]/hook",
    "http://[::]/hook",
    "http://[fe80::1]/hook",
    "http://[fd00:ec2::254]/hook",  # IPv6 metadata (unique local)
    "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
    "http://[::ffff:a9fe:a9fe]/hook",  # IPv4-mapped metadata
    "http://[2002:7f00:1::1]/hook",  # 6to4 wrapping 127.0.0.1
]


@pytest.mark.parametrize("url", REFUSED_LITERALS)
def test_private_literal_addresses_are_refused(settings, url):
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(DestinationError) as refused:
        destinations.check(url)
    assert refused.value.code == "WEBHOOK_URL_FORBIDDEN"


@pytest.mark.parametrize(
    "answers",
    [["10.0.0.5"], ["127.0.0.1"], ["169.254.169.254"], ["fd12::1"], ["93.184.215.14", "192.168.0.1"]],
    ids=["rfc1918", "loopback", "metadata", "ula-v6", "one-public-one-private"],
)
def test_names_resolving_to_private_addresses_are_refused(settings, monkeypatch, answers):
    """A public-looking name is judged by what it resolves to; one private answer is enough."""
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = False
    asked = fake_dns(monkeypatch, {"hooks.example.com": answers})
    with pytest.raises(DestinationError) as refused:
        destinations.check("https://hooks.example.com/x")
    assert refused.value.code == "WEBHOOK_URL_FORBIDDEN"
    assert asked == ["hooks.example.com"]


def test_public_name_is_accepted_and_pinned_to_its_address(settings, monkeypatch):
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = False
    fake_dns(monkeypatch, {"hooks.example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]})
    destination = destinations.check("https://hooks.example.com:8443/in?x=1")
    assert (destination.scheme, destination.host, destination.port) == ("https", "hooks.example.com", 8443)
    assert destination.target == "/in?x=1" and destination.address == "93.184.215.14"


def test_unresolvable_and_malformed(settings, monkeypatch):
    fake_dns(monkeypatch, {"nowhere.invalid": None})
    with pytest.raises(DestinationError) as unresolvable:
        destinations.check("https://nowhere.invalid/")
    assert unresolvable.value.code == "WEBHOOK_URL_UNRESOLVABLE"
    for url in ("gopher://x/", "https:///nohost", "http://user:pw@hooks.example.com/", "http://h:99999/"):
        with pytest.raises(DestinationError) as malformed:
            destinations.check(url)
        assert malformed.value.code == "WEBHOOK_URL_INVALID", url


def test_allow_private_lifts_the_guard(settings):
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = True
    assert destinations.check("http://127.0.0.1:9/hook").address == "127.0.0.1"


@pytest.mark.django_db
def test_guard_applies_again_at_delivery_after_dns_changes(settings, monkeypatch, alice, receiver):
    """Registered while the name was public; at delivery it resolves to a private address
    (DNS rebinding): the attempt is refused, recorded, and nothing reaches the private host."""
    from notifications import services
    from notifications.models import WebhookDelivery

    port = receiver.server.server_address[1]
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = False
    dns = {"hooks.example.com": ["93.184.215.14"]}
    fake_dns(monkeypatch, dns)
    endpoint = services.register_endpoint(
        owner=alice, url=f"http://hooks.example.com:{port}/hook", events=["run.failed"]
    )
    dns["hooks.example.com"] = ["127.0.0.1"]
    delivery = _pending_delivery(endpoint)
    services.attempt_delivery(delivery.pk)
    delivery.refresh_from_db()
    assert receiver.received == []
    assert delivery.attempt_count == 1 and delivery.state == WebhookDelivery.State.PENDING
    assert "WEBHOOK_URL_FORBIDDEN" in delivery.attempts.get().error


@pytest.mark.django_db
def test_delivery_connects_to_the_checked_address_with_the_original_host(settings, monkeypatch, alice, receiver):
    """The connection goes to the address the check saw (no second lookup to rebind), while the
    Host header still names the URL's host."""
    from notifications import services

    port = receiver.server.server_address[1]
    asked = fake_dns(monkeypatch, {"hooks.internal.test": ["127.0.0.1"]})
    endpoint = services.register_endpoint(
        owner=alice, url=f"http://hooks.internal.test:{port}/in", events=["run.failed"]
    )
    asked.clear()
    services.attempt_delivery(_pending_delivery(endpoint).pk)
    assert asked == ["hooks.internal.test"]  # resolved once, by the check
    assert receiver.received[0].headers["Host"] == f"hooks.internal.test:{port}"
    assert receiver.received[0].path == "/in"


@pytest.mark.django_db
def test_redirects_are_not_followed(alice, receiver):
    """A 3xx is an answer, not an instruction: not followed, not retried, recorded."""
    from notifications import services
    from notifications.models import WebhookDelivery

    receiver.answers = [302]
    endpoint = services.register_endpoint(owner=alice, url=receiver.url, events=["run.failed"])
    delivery = _pending_delivery(endpoint)
    services.attempt_delivery(delivery.pk)
    delivery.refresh_from_db()
    assert len(receiver.received) == 1
    assert delivery.state == WebhookDelivery.State.FAILED and delivery.last_status_code == 302


def _pending_delivery(endpoint):
    from django.utils import timezone

    from notifications.models import WebhookDelivery

    return WebhookDelivery.objects.create(
        endpoint=endpoint, event="run.failed", payload={"event": "run.failed"}, next_attempt_at=timezone.now()
    )
