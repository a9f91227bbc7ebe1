"""processes.group_messages: channel-layer messages from sync code go out through one loop per
process, without the caller waiting, each (group, type) once per hand-over."""

from __future__ import annotations

import os
import threading
from unittest import mock

import pytest
from channels.layers import InMemoryChannelLayer

from processes import group_messages
from processes.wakeups import listen_on_host

WAIT_SECONDS = 10


class RecordingLayer:
    """Stands for a cross-process layer; the first send can hold the sender's loop still."""

    def __init__(self, hold_first: threading.Event | None = None):
        self.sent: list[tuple[str, str]] = []
        self.named: list[str] = []  # the group each message names (a web process's channel is in many)
        self.hold_first = hold_first
        self.first_started = threading.Event()
        self.all_sent = threading.Event()
        self.expected = 0

    async def group_send(self, group, message):
        if not self.sent and self.hold_first is not None:
            self.first_started.set()
            assert self.hold_first.wait(WAIT_SECONDS)  # blocks the loop: later messages pile up
        self.sent.append((group, message["type"]))
        self.named.append(message["group"])
        if len(self.sent) >= self.expected:
            self.all_sent.set()


@pytest.fixture
def layer(monkeypatch):
    release = threading.Event()
    recording = RecordingLayer(hold_first=release)
    monkeypatch.setattr(group_messages, "get_channel_layer", lambda: recording)
    sender = group_messages._Sender()
    monkeypatch.setattr(group_messages, "_sender", sender)
    yield recording, release
    release.set()
    sender.drain(WAIT_SECONDS)


def test_messages_handed_over_while_the_loop_is_busy_go_out_once_each(layer):
    recording, release = layer
    recording.expected = 3
    group_messages.send_to_groups([("run-1", {"type": "run.changed"})])
    assert recording.first_started.wait(WAIT_SECONDS)
    group_messages.send_to_groups([("run-2", {"type": "run.changed"}), ("user-7", {"type": "run.changed"})])
    group_messages.send_to_groups([("run-2", {"type": "run.changed"})])  # returns at once: the loop is held
    release.set()
    assert recording.all_sent.wait(WAIT_SECONDS)
    group_messages._sender.drain(WAIT_SECONDS)
    assert recording.sent == [("run-1", "run.changed"), ("run-2", "run.changed"), ("user-7", "run.changed")]
    assert recording.named == ["run-1", "run-2", "user-7"]


def test_a_failing_layer_never_fails_the_caller(monkeypatch, caplog):
    class BrokenLayer:
        async def group_send(self, group, message):
            raise ConnectionError("redis is gone")

    monkeypatch.setattr(group_messages, "get_channel_layer", BrokenLayer)
    sender = group_messages._Sender()
    monkeypatch.setattr(group_messages, "_sender", sender)
    group_messages.send_to_groups([("run-1", {"type": "run.changed"})])
    sender.drain(WAIT_SECONDS)
    assert "could not send run.changed to run-1" in caplog.text


def test_a_forked_child_sends_through_a_loop_of_its_own(layer):
    recording, release = layer
    release.set()
    recording.expected = 1
    group_messages.send_to_groups([("run-1", {"type": "run.changed"})])
    assert recording.all_sent.wait(WAIT_SECONDS)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the parent's loop thread does not exist here
        try:
            recording.all_sent.clear()
            recording.expected = 2
            group_messages.send_to_groups([("run-2", {"type": "run.changed"})])
            ok = recording.all_sent.wait(WAIT_SECONDS) and recording.sent[-1] == ("run-2", "run.changed")
            os.write(write_end, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 2) == b"ok"
    os.waitpid(child, 0)
    os.close(read_end)


def test_without_a_cross_process_layer_each_loop_listening_on_the_host_gets_each_kind_once(settings, tmp_path):
    """The embedded default: the worker's commit reaches the web process's watchers (live.watcher)
    as one datagram per kind of message, whatever the groups."""
    settings.DATA_DIR = tmp_path
    layer = InMemoryChannelLayer()
    sockets = [listen_on_host(group_messages.LIVE_TOPIC, name) for name in ("a", "b")]
    try:
        for listening in sockets:
            listening.settimeout(WAIT_SECONDS)
        with mock.patch.object(group_messages, "get_channel_layer", lambda: layer):
            group_messages.send_to_groups(
                [
                    ("run-1", {"type": "run.changed"}),
                    ("user-7", {"type": "run.changed"}),
                    ("token-3", {"type": "connection.ended"}),
                ]
            )
        for listening in sockets:
            assert [listening.recv(64), listening.recv(64)] == [b"run.changed", b"connection.ended"]
            listening.setblocking(False)
            with pytest.raises(BlockingIOError):
                listening.recv(64)
    finally:
        for listening in sockets:
            listening.close()
