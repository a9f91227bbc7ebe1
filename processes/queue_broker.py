"""The embedded default's task broker: django-q2's ORM broker, woken instead of polled; and the
one broker each process enqueues its tasks through, whichever it is.

django-q2's ORM broker sleeps a fixed `poll` between empty queries, which costs CPU all day
while idle (issue #16). Here the waiting pusher sleeps on a Unix datagram socket of its own,
announced under the data dir (processes.wakeups.listen_on_host), with a timeout that backs off while the queue stays empty; `enqueue` (in any
process: web, worker) sends every such socket a byte after writing the row, so new work is
seen at once. The back-off cap bounds what a missed wake-up (a row committed after its
datagram) can cost.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

from django.db import close_old_connections, connections
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from .wakeups import broadcast, listen_on_host, wake_on_host

# Settings set django-q2's own `poll` to 0: the wait below replaces its fixed sleep. Work is
# enqueued after its transaction commits, so a wake-up is not missed in practice and the waits
# only bound what one would cost. Starting them at 10 ms polled the queue about 3 times in every
# pause between runs: 6–7 ms of a run's server CPU (issue #16), against 2.5 from 0.25 s. Idle,
# one empty query per second was a fifth of the whole service's idle CPU; every 5 s it is noise.
# Without a socket nothing wakes the pusher early, so it never waits longer than a second.
FIRST_WAIT_SECONDS = 0.25
LONGEST_WAIT_SECONDS = 5.0
LONGEST_BLIND_WAIT_SECONDS = 1.0


QUEUE_TOPIC = "queue"

_this_process: tuple[int, Broker] | None = None  # (pid, its broker): a forked child makes its own


def this_process_broker() -> Broker:
    """The broker this process enqueues tasks through (django_q.tasks.async_task's `broker`).
    Without one, django-q2 builds a broker for every task: on Redis a client with a pool of its
    own, so every enqueued turn opened a TCP connection, left for the cyclic collector to close.
    Both brokers are safe to share between threads: redis-py's pool gives each command a
    connection, the ORM broker's rows are written on the calling thread's database connection."""
    global _this_process
    if _this_process is None or _this_process[0] != os.getpid():
        _this_process = (os.getpid(), get_broker())
    return _this_process[1]


class WakeableORM(ORM):
    _socket: socket.socket | None = None
    _socket_pid: int | None = None
    _wait: float = 0.0

    @staticmethod
    def get_connection(list_key: str | None = None):
        """django-q2's, without opening a database connection to learn whether one is in a
        transaction. The worker builds its broker just before it forks the cluster; a SQLite
        connection opened (and closed) there left each of the cluster's processes with about
        2 MiB more private memory, the cap-4 tree with 15 MiB (docs/benchmarks.md as of a758104)."""
        _close_if_stale()
        return OrmQ.objects.using(Conf.ORM)

    # django-q2's statements, written out: through the ORM a task's insert, its taking (a read,
    # then an update per task) and its delete cost 1.5 ms of CPU per turn, on top of what the
    # database took to run them (issue #43).

    def enqueue(self, task):
        connection = self._connection()
        due_now = _datetime_param(timezone.now(), connection)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {_TABLE} ({_KEY}, payload, {_LOCK}) VALUES (%s, %s, %s) RETURNING id",
                [self.list_key or Conf.CLUSTER_NAME, task, due_now],
            )
            (pk,) = cursor.fetchone()
        broadcast(QUEUE_TOPIC)  # every waiting pusher, in any process of the host
        return pk

    def delete(self, task_id):
        with self._connection().cursor() as cursor:
            cursor.execute(f"DELETE FROM {_TABLE} WHERE id = %s", [task_id])

    def _take_due(self) -> list[tuple[int, str]]:
        """django-q2's dequeue in one statement: the oldest due tasks (Conf.BULK), each locked
        until Conf.RETRY from now. The outer condition is checked again on a row another cluster
        took meanwhile (PostgreSQL re-reads a row it waited for), so a task goes to one of them."""
        connection = self._connection()
        due, locked_until = (_datetime_param(at, connection) for at in (timezone.now(), self.timeout(None)))
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_TABLE} SET {_LOCK} = %s WHERE {_LOCK} < %s AND id IN "
                f"(SELECT id FROM {_TABLE} WHERE {_KEY} = %s AND {_LOCK} < %s ORDER BY id LIMIT %s) "
                "RETURNING id, payload",
                [locked_until, due, self.list_key, due, Conf.BULK],
            )
            return sorted(cursor.fetchall())

    @staticmethod
    def _connection():
        _close_if_stale()  # as django-q2's broker does before each statement
        return connections[Conf.ORM]

    def dequeue(self):
        tasks = self._take_due()
        if tasks:
            self._wait = 0.0
            return tasks
        self._wait = min(max(self._wait * 2, FIRST_WAIT_SECONDS), LONGEST_WAIT_SECONDS)
        try:
            sock = self._listening_socket()
        except OSError:  # e.g. a data dir it cannot write to: back-off polling only
            time.sleep(min(self._wait, LONGEST_BLIND_WAIT_SECONDS))
            return None
        with contextlib.suppress(TimeoutError, BlockingIOError):
            sock.settimeout(self._wait)
            while True:  # drain: one wake-up covers every enqueue before it
                sock.recv(1)
                sock.settimeout(0)
        return None

    def _listening_socket(self) -> socket.socket:
        """This process's socket (a forked pusher makes its own: the pid names it)."""
        if self._socket is None or self._socket_pid != os.getpid():
            self._socket = listen_on_host(QUEUE_TOPIC, str(os.getpid()))
            self._socket_pid = os.getpid()
        return self._socket


def _close_if_stale() -> None:
    if not connections[Conf.ORM].in_atomic_block:
        close_old_connections()  # a stale connection is closed, never one inside a transaction


_TABLE, _KEY, _LOCK = (connections["default"].ops.quote_name(name) for name in (OrmQ._meta.db_table, "key", "lock"))


def _datetime_param(value, connection):
    return OrmQ._meta.get_field("lock").get_db_prep_value(value, connection)


def wake_pusher(pid: int) -> None:
    """Wake one pusher (a stopping cluster's: it sees the stop at once, not after its wait)."""
    wake_on_host(QUEUE_TOPIC, [str(pid)])
