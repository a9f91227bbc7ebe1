"""R-FS2 on the scale-out configuration: one user's cap on live connections holds across two
daphne processes sharing PostgreSQL and Redis, and a place given back on one is free on the other."""

from __future__ import annotations

import pytest

from tests.scaleout.deployment import wait_until
from tests.support.wsclient import Closed, WebSocket

pytestmark = [pytest.mark.scaleout, pytest.mark.timeout(180)]


def _outcome(port: int, path: str, token: str) -> tuple[str, object]:
    """("open", "snapshot"), or ("closed", code) after any error message."""
    socket = WebSocket(port, path, {"Authorization": f"Token {token}"})
    try:
        for _ in range(3):
            first = socket.recv()
            if first["type"] != "error":
                return "open", first["type"]
        return "open", "errors"
    except Closed as closed:
        return "closed", closed.code
    finally:
        socket.close()


def test_the_cap_counts_connections_on_every_web_process(deployments):
    d = deployments(webs=2, workers=1, env={"SKILLRUNNER_USER_MAX_STREAMS": "2"}).start()
    run = d.create("alice", "trip-planner", mode="interactive")
    d.wait_status("alice", run, {"waiting_user"})
    token = d.tokens["alice"]
    path = f"/ws/runs/{run}/"
    held = [WebSocket(port, path, {"Authorization": f"Token {token}"}) for port in d.web_ports]
    assert [socket.recv()["type"] for socket in held] == ["snapshot", "snapshot"]

    assert [_outcome(port, path, token) for port in d.web_ports] == [("closed", 4429), ("closed", 4429)]
    status, body = d.request("GET", f"/v1/jobs/{run}/events", "alice", web=1)
    assert (status, body["detail"]["code"]) == (429, "TOO_MANY_STREAMS")
    assert (
        _outcome(
            d.web_ports[0], f"/ws/runs/{d.create('bob', 'haiku-writer', input={'topic': 'sea'})}/", d.tokens["bob"]
        )[0]
        == "open"
    )

    held.pop().close()  # given back on web 1: free on web 0
    wait_until(lambda: _outcome(d.web_ports[0], path, token) == ("open", "snapshot"), 10, "a place on web 0")
    held[0].close()
