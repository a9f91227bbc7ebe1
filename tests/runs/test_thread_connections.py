"""Threads of the service's own that use the database close their connections when their work is
done (PostgreSQL: a connection left open in a thread kept the test database from being dropped,
and each holds a server process). Checked with the worker's settings, which keep connections,
against what the server itself counts; the cyclic garbage collector, which would close a
forgotten connection at some later moment, is held off meanwhile."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest
from django.db import connection
from django.utils import timezone

from notifications import sender as sender_module
from notifications import services
from notifications.models import WebhookDelivery
from runs.supervision import start_supervisor
from tests.support.service_processes import wait_until
from tests.support.webhook_receiver import WebhookReceiver
from worker.management.commands.worker import keep_database_connections

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(60),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="counts the server's connections"),
]


def other_connections() -> int:
    """Connections to the test database besides this thread's, as the server counts them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def none_left() -> bool:
    return other_connections() == 0  # a closed connection's server process ends a moment later


@pytest.fixture
def worker_connections(monkeypatch) -> Iterator[None]:
    """The worker's settings (connections kept, no pool), no other connection open, no cyclic GC."""
    connection.close()
    connection.close_pool()  # its idle connections would count
    settings_dict = connection.settings_dict
    monkeypatch.setitem(settings_dict, "OPTIONS", dict(settings_dict["OPTIONS"]))
    monkeypatch.setitem(settings_dict, "CONN_MAX_AGE", settings_dict["CONN_MAX_AGE"])
    keep_database_connections()
    wait_until(none_left, 10, "the connections of earlier tests to end")
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        connection.close()


def test_a_webhook_sender_thread_closes_its_connection_after_each_attempt(worker_connections, alice, settings):
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = True
    sender = sender_module._Sender()
    try:
        with WebhookReceiver() as receiver:
            endpoint = services.register_endpoint(owner=alice, url=receiver.url, events=["run.failed"])
            delivery = WebhookDelivery.objects.create(
                endpoint=endpoint, event="run.failed", payload={"event": "run.failed"}, next_attempt_at=timezone.now()
            )
            assert sender.submit(services.attempt_delivery, delivery.pk)
            wait_until(lambda: sender._busy == 0, 10, "the attempt to end")
        assert WebhookDelivery.objects.get(pk=delivery.pk).state == "delivered"
        wait_until(none_left, 5, "the sender thread's connection to be closed")
        assert sender._pool is not None and sender._pool._threads  # its thread lives on, idle
    finally:
        if sender._pool is not None:
            sender._pool.shutdown(wait=True)


def test_the_supervisor_thread_closes_its_connection_when_it_stops(worker_connections):
    stop = threading.Event()
    thread = start_supervisor(stop, interval=0.01, idle_interval=0.01)
    try:
        wait_until(lambda: other_connections() == 1, 10, "the supervisor's connection, kept between ticks")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    wait_until(none_left, 5, "the supervisor's connection to be closed")
