"""The close codes this service sends that autobahn refuses from an application (live/shutdown.py):
1001 when a web stops (R-OP10) and 1011 when a socket's events could not be read. Both reach the
client as close frames; before, 1011 raised inside the consumer and left the socket open and
silent."""

from __future__ import annotations

from unittest import mock

import pytest

pytest.importorskip("daphne.server")  # installs the reactor daphne serves with, as `serve` does


@pytest.mark.parametrize("code", [1001, 1011])
def test_a_protocol_close_code_is_sent_as_a_close_frame(code):
    from daphne.ws_protocol import WebSocketProtocol

    from live.shutdown import install_in_daphne

    original = WebSocketProtocol.serverClose
    try:
        install_in_daphne()
        protocol = mock.Mock(spec=WebSocketProtocol)
        WebSocketProtocol.serverClose(protocol, code)
        protocol.sendCloseFrame.assert_called_once_with(code=code)
    finally:
        WebSocketProtocol.serverClose = original


def test_an_application_code_goes_the_libraries_way():
    from daphne.ws_protocol import WebSocketProtocol

    from live.shutdown import install_in_daphne

    original = WebSocketProtocol.serverClose
    calls = []
    WebSocketProtocol.serverClose = lambda protocol, code=None: calls.append(code)
    try:
        install_in_daphne()
        protocol = mock.Mock(spec=WebSocketProtocol)
        WebSocketProtocol.serverClose(protocol, 4401)
        assert calls == [4401] and not protocol.sendCloseFrame.called
    finally:
        WebSocketProtocol.serverClose = original


def test_every_close_the_service_sends_waits_for_the_client():
    """Every code, sent by daphne's way or as a frame, waits CLOSING_HANDSHAKE_SECONDS for the client's
    answer instead of autobahn's 1 s (tests/end_to_end/test_closing_handshake.py: what the 1 s lost)."""
    from daphne.ws_protocol import WebSocketProtocol

    from live.shutdown import CLOSING_HANDSHAKE_SECONDS, install_in_daphne

    original = WebSocketProtocol.serverClose
    try:
        install_in_daphne()
        for code in (1000, 1001, 1011, 4401):
            protocol = mock.Mock(spec=WebSocketProtocol)
            protocol.closeHandshakeTimeout = 1  # autobahn's
            WebSocketProtocol.serverClose(protocol, code)
            assert protocol.closeHandshakeTimeout == CLOSING_HANDSHAKE_SECONDS, code
    finally:
        WebSocketProtocol.serverClose = original
