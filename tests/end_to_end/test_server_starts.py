"""How the suite starts its servers: a web that cannot start fails its wait at once and says why
(CI once saw only "timed out after 30s waiting for web 0 to answer"), and the ports the suite
picks stay out of the kernel's own picks until a server takes them."""

from __future__ import annotations

import errno
import socket
import time

from tests.support.service_processes import ServiceProcesses, free_port


def test_a_web_that_exits_fails_its_wait_at_once_with_the_end_of_its_log(tmp_path):
    service = ServiceProcesses(tmp_path / "data")
    taken = socket.socket()  # listening: daphne cannot bind the port
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the port is held (free_port)
    taken.bind(("127.0.0.1", service.port))
    taken.listen()
    try:
        service.start_web()
        started = time.monotonic()
        try:
            service.wait_web(timeout=60)
        except AssertionError as failure:
            message = str(failure)
        else:
            raise AssertionError("the wait passed with the port taken by another socket")
        assert time.monotonic() - started < 30, "the wait outlasted the process"
        assert message.startswith("exited with 1 before the web server to answer"), message
        assert "Address already in use" in message, message
    finally:
        taken.close()
        service.stop()


def test_a_picked_port_stays_held_for_the_server_that_binds_it():
    """Held, the port is in use for a bind of the kernel's choosing or any plain bind; only a
    server binding it with SO_REUSEADDR, as daphne, Redis and PostgreSQL do, gets it."""
    picked = free_port()
    with socket.socket() as plain:
        try:
            plain.bind(("127.0.0.1", picked))
        except OSError as error:
            assert error.errno == errno.EADDRINUSE
        else:
            raise AssertionError(f"port {picked} was free for anyone to take")
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", picked))
        server.listen()
