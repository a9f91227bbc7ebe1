"""The embedded default's broker (processes.queue_broker.WakeableORM) keeps django-q2's ORM broker's
semantics with its statements written out (issue #43). On PostgreSQL too: the broker a deployment
with DATABASE_URL and no REDIS_URL runs, where several clusters take tasks at once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ

from processes.queue_broker import WakeableORM

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def on_the_database(monkeypatch):
    monkeypatch.setattr(Conf, "ORM", "default")  # a Redis deployment's broker is Redis: here it is this one


def test_a_task_is_taken_oldest_first_locked_for_the_retry_time_and_deleted_once_done(monkeypatch):
    """django-q2's ORM broker semantics, its statements written out (issue #43): a task is handed
    out once until Conf.RETRY has passed (a crashed cluster's task comes back then), and acknowledged
    or failed it is gone. Taking one is one statement."""
    monkeypatch.setattr(Conf, "BULK", 2)
    broker = WakeableORM(list_key="semantics")
    first, second, third = (broker.enqueue(name) for name in ("first", "second", "third"))
    WakeableORM(list_key="another cluster").enqueue("theirs")
    assert OrmQ.objects.get(pk=first).key == "semantics"

    before = timezone.now()
    with CaptureQueriesContext(connection) as statements:
        taken = broker.dequeue()
    assert taken == [(first, "first"), (second, "second")]
    assert len(statements) == 1
    locked = OrmQ.objects.get(pk=first).lock
    assert before + timedelta(seconds=Conf.RETRY) <= locked <= timezone.now() + timedelta(seconds=Conf.RETRY)
    assert broker.dequeue() == [(third, "third")]  # the others stay locked

    OrmQ.objects.filter(pk=first).update(lock=timezone.now() - timedelta(seconds=1))  # its retry time passed
    assert broker.dequeue() == [(first, "first")]
    broker.acknowledge(first)
    broker.fail(second)
    assert sorted(OrmQ.objects.values_list("payload", flat=True)) == ["theirs", "third"]


@pytest.mark.django_db(transaction=True)
def test_pushers_taking_tasks_at_once_take_each_task_once():
    """Several clusters on one database (each a connection of its own): on PostgreSQL an update
    that waited for another's row lock checks the row again, so a task taken meanwhile is skipped."""
    tasks = {WakeableORM(list_key="race").enqueue(f"task {n}") for n in range(60)}
    taken: list[int] = []
    start = threading.Barrier(4)

    def pusher() -> None:
        broker = WakeableORM(list_key="race")
        try:
            start.wait(timeout=10)
            for _ in range(200):  # bounded: 60 tasks between four
                mine = broker._take_due()
                taken.extend(pk for pk, _ in mine)
                if not mine and len(taken) >= len(tasks):
                    break
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pusher) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(taken) == sorted(tasks)
