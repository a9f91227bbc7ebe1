"""Waking a thread that waits for another process's commit, instead of it polling the database.

A waiter listens under a name; `wake(name)`, called once the change committed, ends its wait at
once. On the embedded default every process runs on one host, so a waiter binds a Unix datagram
socket in the abstract namespace, named after the data dir and the name: no file to clean up, and
no limit on the data dir's path length. Listeners a sender cannot name (the task broker's pushers,
the web processes' live watchers) announce themselves with a file each in a directory of their
topic, which senders list (broadcast). With Redis,
web and workers may run on different hosts: the waiter blocks on a Redis list; a wake-up nobody
waited for expires in a minute. Either way a waiter reads what it waits for
after it starts listening and whenever its wait times out, so a wake-up lost (a full buffer, the
broker away) costs it one timeout at most.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

# A wake-up nobody took (its waiter ended meanwhile) is dropped after this long.
KEPT_SECONDS = 60
# Without a socket or Redis a waiter falls back to looking this often.
BLIND_WAIT_SECONDS = 0.25

_client: redis.Redis | None = None


def bind_datagram_socket(address: str) -> socket.socket:
    """A socket listening at an abstract address (a str starting with NUL)."""
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        listening.bind(address)
    except OSError:
        listening.close()
        raise
    return listening


def _send(message: bytes, addresses: Iterable[tuple[str, Path | None]]) -> None:
    """`message` to each address; the announcement of one nobody listens at any more is removed."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for address, announcement in addresses:
            try:
                sender.sendto(message, address)
            except ConnectionRefusedError:
                if announcement is not None:
                    announcement.unlink(missing_ok=True)
            except BlockingIOError:
                pass  # its buffer is full of wake-ups already


def _abstract_address(name: str) -> str:
    installation = hashlib.sha256(str(settings.DATA_DIR).encode()).hexdigest()[:16]
    return f"\0skillrunner-{installation}-{name}"


def _announcements(topic: str) -> Path:
    return Path(settings.DATA_DIR) / f"{topic}-wakeup"


def listen_on_host(topic: str, name: str) -> socket.socket:
    """A socket that broadcast(topic) and wake_on_host(topic, [name]) reach. Its address is
    abstract, and a file of its name in the topic's directory announces it (the senders list them;
    the first to find nobody listening removes it, so a process that died leaves nothing behind)."""
    listening = bind_datagram_socket(_abstract_address(f"{topic}-{name}"))
    directory = _announcements(topic)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).touch()
    except OSError:
        listening.close()
        raise
    return listening


def stop_listening_on_host(topic: str, name: str, listening: socket.socket) -> None:
    listening.close()
    (_announcements(topic) / name).unlink(missing_ok=True)


def wake_on_host(topic: str, names: Iterable[str], message: bytes = b"!") -> None:
    directory = _announcements(topic)
    _send(message, ((_abstract_address(f"{topic}-{name}"), directory / name) for name in names))


def broadcast(topic: str, message: bytes = b"!") -> None:
    """`message` to every listener of `topic` on this host (the embedded default runs on one)."""
    try:
        names = [announcement.name for announcement in _announcements(topic).iterdir()]
    except OSError:  # nobody listened yet
        return
    wake_on_host(topic, names, message)


def _redis() -> redis.Redis:
    global _client
    if _client is None:  # one pool per process; redis-py opens new connections after a fork
        import redis  # with REDIS_URL only: on the embedded default it cost each process 60 ms

        _client = redis.Redis.from_url(settings.REDIS_URL)
    return _client


def _redis_error() -> type[Exception]:
    """What redis-py raises, for an `except` (evaluated once something was raised)."""
    from redis import RedisError

    return RedisError


def _redis_key(name: str) -> str:
    return f"{settings.SKILLRUNNER_QUEUE_NAME}:wakeup:{name}"


def wake(name: str) -> None:
    """End the wait of whoever listens under `name` (nobody may: then it is a no-op)."""
    if settings.REDIS_URL:
        try:
            pipeline = _redis().pipeline()
            pipeline.rpush(_redis_key(name), 1)
            pipeline.expire(_redis_key(name), KEPT_SECONDS)
            pipeline.execute()
        except _redis_error():
            logger.warning("could not wake %s; it looks again after its timeout", name, exc_info=True)
        return
    _send(b"!", [(_abstract_address(name), None)])


class Listener:
    """`with Listener(name) as listener: … listener.wait(timeout)`."""

    def __init__(self, name: str):
        self.name = name
        self._socket: socket.socket | None = None

    def __enter__(self) -> Listener:
        if settings.REDIS_URL:
            # A wake-up left from an earlier wait is stale: the waiter reads the state next anyway.
            with contextlib.suppress(_redis_error()):
                _redis().delete(_redis_key(self.name))
        else:
            try:
                self._socket = bind_datagram_socket(_abstract_address(self.name))
            except OSError:  # another waiter holds the name
                logger.info("no wake-up socket for %s: it looks every %.2fs", self.name, BLIND_WAIT_SECONDS)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._socket is not None:
            self._socket.close()

    def wait(self, timeout: float) -> bool:
        """Whether a wake-up came within `timeout` seconds; every wake-up pending is used up."""
        if settings.REDIS_URL:
            return self._wait_on_redis(timeout)
        if self._socket is None:
            time.sleep(min(timeout, BLIND_WAIT_SECONDS))
            return False
        woken = False
        with contextlib.suppress(TimeoutError, BlockingIOError):
            self._socket.settimeout(timeout)
            while True:  # drain: one wake-up stands for every one before it
                self._socket.recv(1)
                woken = True
                self._socket.settimeout(0)
        return woken

    def _wait_on_redis(self, timeout: float) -> bool:
        key = _redis_key(self.name)
        try:
            woken = _redis().blpop([key], timeout=timeout) is not None
            if woken:
                _redis().delete(key)  # what follows reads the latest state anyway
            return woken
        except _redis_error():
            logger.warning("could not wait for %s on Redis", self.name, exc_info=True)
            time.sleep(min(timeout, BLIND_WAIT_SECONDS))
            return False
