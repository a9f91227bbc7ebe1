"""The embedded default's broker is woken, not polled (issue #16): an enqueue reaches the
waiting pusher's socket, and a socket whose pusher is gone is cleared away."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.db import connection
from django_q.brokers import Broker, get_broker
from django_q.conf import Conf
from django_q.models import OrmQ

from notifications.task_queue import enqueue_delivery
from processes import queue_broker
from processes.queue_broker import QUEUE_TOPIC, WakeableORM
from processes.wakeups import listen_on_host
from runs.task_queue import enqueue_turn

pytestmark = pytest.mark.django_db


def test_enqueue_wakes_the_waiting_pusher_and_clears_dead_sockets():
    pusher = WakeableORM(list_key="wake-test")
    assert pusher.dequeue() is None  # empty: it waited on its socket, which now exists
    listening = pusher._listening_socket()
    listening.setblocking(False)
    with pytest.raises(BlockingIOError):
        listening.recv(1)

    listen_on_host(QUEUE_TOPIC, "999999999").close()  # as a process that died: announced, nobody listening
    dead = Path(settings.DATA_DIR) / "queue-wakeup" / "999999999"
    assert dead.exists()

    WakeableORM(list_key="wake-test").enqueue("payload")
    assert listening.recv(1) == b"!"
    assert not dead.exists()
    assert [payload for _, payload in pusher.dequeue()] == ["payload"]


@pytest.mark.django_db(transaction=True)
def test_enqueue_uses_the_callers_database_connection():
    """django-q2's broker runs close_old_connections() twice per enqueue: with connections not
    kept (CONN_MAX_AGE 0) that closed the caller's, so every run created in the web process opened
    another. They are kept on the embedded default (settings), in the web too, for
    SKILLRUNNER_WORKER_CONN_MAX_AGE seconds from when they opened: so the test opens its own
    rather than inherit one an earlier test opened more than that long ago."""
    connection.close()
    connection.ensure_connection()
    before = connection.connection
    WakeableORM(list_key="connection-test").enqueue("payload")
    assert connection.connection is before


@pytest.mark.django_db(transaction=True)
def test_building_the_broker_opens_no_connection():
    """The worker builds its broker just before forking the cluster: a SQLite connection opened
    there cost every cluster process about 2 MiB of private memory (#16). django-q2's own
    get_connection() opened one to ask whether it was inside a transaction."""
    connection.close()
    broker = WakeableORM(list_key="no-connection")
    assert connection.connection is None
    assert broker.queue_size() == 0  # it still works: the first query opens the connection
    assert connection.connection is not None


@pytest.mark.django_db(transaction=True)
def test_a_connection_inside_a_transaction_is_never_closed_under_it():
    """Stale connections are closed before the broker queries, but never one in an atomic block:
    enqueueing from inside a transaction keeps its connection (and the transaction)."""
    from django.db import transaction

    with transaction.atomic():
        before = connection.connection
        connection.close_at = 0  # stale: close_old_connections() would close it outside a transaction
        WakeableORM(list_key="in-transaction").enqueue("payload")
        assert connection.connection is before


def test_a_process_enqueues_every_task_through_one_broker(monkeypatch):
    """Unless given one, django-q2 builds a broker for each task: on Redis a client of its own, and
    a TCP connection for every turn enqueued."""
    monkeypatch.setattr(Conf, "SYNC", False)  # through the broker, as outside the suite
    monkeypatch.setattr(queue_broker, "_this_process", None)
    built: list[Broker] = []
    monkeypatch.setattr(queue_broker, "get_broker", lambda: built.append(get_broker()) or built[-1])
    enqueue_turn(uuid.uuid4(), 1)
    enqueue_turn(uuid.uuid4(), 2)
    enqueue_delivery(1)
    assert len(built) == 1
    assert sorted(OrmQ.objects.values_list("key", flat=True)) == [Conf.CLUSTER_NAME] * 3
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as a child forked since: its own
    assert queue_broker.this_process_broker() is built[1]


def test_the_cluster_status_is_kept_nowhere():
    """django-q2's sentinel saved its status every guard cycle for `qmonitor`, which nothing here
    reads; on the embedded default that was a write to the database cache every 2 s (#16)."""
    from django_q.brokers import get_broker

    broker = get_broker()
    broker.set_stat("django_q:stat:test", "status", 60)
    assert broker.get_stat("django_q:stat:test") is None


class _SilentSocket:
    """A wake-up socket that never receives anything: each wait ends at once, its timeout noted."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def settimeout(self, seconds: float) -> None:
        if seconds:
            self.waits.append(seconds)

    def recv(self, size: int) -> bytes:
        raise TimeoutError


def test_the_pushers_wait_backs_off_to_its_longest_and_starts_over_with_work(monkeypatch):
    """While the queue stays empty each wait doubles from 0.25 s up to 5 s; a task found starts
    the waits over. Without a wake-up socket (nothing can wake it early) it never sleeps over 1 s."""
    from processes import queue_broker

    silent = _SilentSocket()
    pusher = WakeableORM(list_key="back-off")
    monkeypatch.setattr(pusher, "_listening_socket", lambda: silent)
    for _ in range(7):
        assert pusher.dequeue() is None
    assert silent.waits == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]

    WakeableORM(list_key="back-off").enqueue("payload")
    assert [payload for _, payload in pusher.dequeue()] == ["payload"]
    assert pusher.dequeue() is None
    assert silent.waits[-1] == queue_broker.FIRST_WAIT_SECONDS

    def no_socket():
        raise OSError("AF_UNIX path too long")

    slept: list[float] = []
    monkeypatch.setattr(pusher, "_listening_socket", no_socket)
    monkeypatch.setattr(queue_broker, "time", SimpleNamespace(sleep=slept.append))  # this module's sleeps only
    for _ in range(5):
        assert pusher.dequeue() is None
    assert slept == [0.5, 1.0, 1.0, 1.0, 1.0]
