"""A stopping web process closes its websockets with 1001, "going away" (R-OP10): the client
reconnects to another web process and resumes from its last seq there. Without it, it saw the
TCP connection drop.

daphne, on SIGTERM or SIGINT, stops its reactor after the "before shutdown" triggers are done:
the one registered here cancels every open socket's application, which closes its socket
(live.consumers.LiveConnectionConsumer). daphne's own trigger is not enough: it ends at the first
connection that has no application (an idle keep-alive HTTP connection) without cancelling the
rest. And autobahn lets an application close with 1000 or 3000-4999 only, so 1001 (RFC 6455's
code for a server going down) and 1011 (an internal error: a socket whose events could not be read
— refused, it left the socket open and silent) are sent as its own protocol would send them.

A close this side sends waits CLOSING_HANDSHAKE_SECONDS for the client's answer. autobahn's own
wait is 1 s, after which it drops the TCP connection: a client that read late (a loaded machine, a
slow network) lost whatever it had not read yet, a finished run's last events before its 1000
among them, and saw a clean close (issue #39, item 7).
"""

from __future__ import annotations

import asyncio
import sys

CLOSE_GOING_AWAY = 1001
CLOSE_INTERNAL_ERROR = 1011
# Codes of RFC 6455 that autobahn refuses from an application, but this service sends.
_PROTOCOL_CODES = (CLOSE_GOING_AWAY, CLOSE_INTERNAL_ERROR)
# How long a socket this side closes waits for the client to answer before the TCP connection is
# dropped, with anything still unread (as long as the websockets library's and daphne's own waits).
CLOSING_HANDSHAKE_SECONDS = 10.0

# The application tasks of this process's open sockets (all in its one event loop).
open_sockets: set[asyncio.Task] = set()


def close_sockets_going_away():
    """Cancel every open socket's application; the stop waits until each has closed."""
    from twisted.internet.defer import Deferred

    sockets = list(open_sockets)
    for task in sockets:
        task.cancel()
    return Deferred.fromFuture(asyncio.gather(*sockets, return_exceptions=True))


def install_in_daphne() -> None:
    """When daphne serves this process (it installed its reactor on import): register the trigger
    before daphne adds its own as it starts serving, and let its sockets close with 1001, each
    close waiting CLOSING_HANDSHAKE_SECONDS for the client."""
    if "daphne.server" not in sys.modules:
        return
    from daphne.ws_protocol import WebSocketProtocol
    from twisted.internet import reactor

    server_close = WebSocketProtocol.serverClose

    def close(protocol: WebSocketProtocol, code: int | None = None) -> None:
        # Read by autobahn when the close is sent; its 1 s dropped what a late reader had not read.
        protocol.closeHandshakeTimeout = CLOSING_HANDSHAKE_SECONDS
        if code in _PROTOCOL_CODES:
            protocol.sendCloseFrame(code=code)
        else:
            server_close(protocol, code)

    WebSocketProtocol.serverClose = close
    # (the interface's stub declares its methods without `self`)
    reactor.addSystemEventTrigger("before", "shutdown", close_sockets_going_away)  # type: ignore[arg-type]
