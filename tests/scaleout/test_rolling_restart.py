"""R-OP10 proven: a rolling restart of two workers and two webs on PostgreSQL + Redis, with runs in
flight, loses nothing. Each process in turn gets SIGTERM, is waited for and started again: a worker
drains (its turns finish, it takes no new one), a web closes its sockets with 1001. Afterwards no
run failed, no turn ran twice (engine starts per run and attempt), and a client that watched a run
through both web restarts, reconnecting on 1001 and resuming from its last seq, saw exactly the
run's events 1..N."""

from __future__ import annotations

import threading
import urllib.error
from concurrent.futures import ThreadPoolExecutor

import pytest
from websockets.exceptions import InvalidHandshake

from tests.scaleout.deployment import Deployment, wait_until
from tests.scaleout.invariants import assert_event_log_sound, check_all
from tests.support.wsclient import Closed, HandshakeRefused, WebSocket

pytestmark = [pytest.mark.scaleout, pytest.mark.timeout(240)]

AUTO_RUNS = 14
INTERACTIVE_RUNS = 6
TURN_SECONDS = 2  # the probe engine's pause: a turn still runs when its worker is told to stop
DRAIN_SECONDS = 20


def on_any_web(d: Deployment, action, timeout: float = 30):
    """`action(web)` on whichever web process answers (the other may be restarting)."""
    errors: list[Exception] = []

    def attempt():
        for web in range(len(d.webs)):
            try:
                return (action(web),)
            # A web process stopping or starting: refused, cut off, or not answering the upgrade.
            except (urllib.error.URLError, OSError, HandshakeRefused, InvalidHandshake, Closed) as error:
                errors.append(error)
        return None

    return wait_until(attempt, timeout, f"a web process to answer (last error: {errors[-1:]})")[0]


class Watcher(threading.Thread):
    """A client following one run over its websocket: on 1001 it reconnects to a web process that
    answers, asking for the events after the last seq it saw; it ends when the run's socket closes
    with 1000 (the run finished) or anything else (a failure, kept in `close_codes`)."""

    def __init__(self, d: Deployment, user: str, request_id: str):
        super().__init__(daemon=True)
        self.d, self.user, self.request_id = d, user, request_id
        self.seqs: list[int] = []
        self.close_codes: list[int | None] = []

    def _connect(self, web: int) -> WebSocket:
        path = f"/ws/runs/{self.request_id}/?after_seq={self.seqs[-1] if self.seqs else 0}"
        socket = WebSocket(self.d.web_ports[web], path, {"Authorization": f"Token {self.d.tokens[self.user]}"})
        assert socket.recv()["type"] == "snapshot"
        return socket

    def run(self) -> None:
        while not self.close_codes or self.close_codes[-1] == 1001:
            socket = on_any_web(self.d, self._connect)
            try:
                while True:
                    message = socket.recv(timeout=60)
                    if message["type"] == "event":
                        self.seqs.append(message["seq"])
            except Closed as closed:
                self.close_codes.append(closed.code)
            finally:
                socket.close()


def reply_when_asked(d: Deployment, runs: dict[str, str], stop: threading.Event) -> None:
    """Answer each run's question once it is asked, through whichever web answers."""
    unanswered = dict(runs)
    while unanswered and not stop.wait(0.3):
        for request_id, user in list(unanswered.items()):
            run = on_any_web(d, lambda web, r=request_id, u=user: d.status(u, r, web=web))
            if run["status"] != "waiting_user":
                continue
            body = {"interaction_id": 1, "response": f"zzz{TURN_SECONDS} Lisbon"}
            code, answer = on_any_web(
                d,
                lambda web, r=request_id, u=user, body=body: d.request(
                    "POST", f"/v1/jobs/{r}/interaction/reply", u, body, web=web
                ),
            )
            assert code == 200, answer
            del unanswered[request_id]


def restart_worker(d: Deployment, index: int) -> int:
    """Stop a worker as its systemd unit does, then start a new one; the new one's index."""
    assert d.terminate(d.workers[index], DRAIN_SECONDS + 15) == 0, d.log(f"worker-{index}")[-3000:]
    new = d.start_worker()
    d.wait_worker(new)
    return new


def test_a_rolling_restart_loses_no_run_no_turn_and_no_event(deployments):
    d = deployments(webs=2, workers=2, max_turns=4, env={"SKILLRUNNER_DRAIN_SECONDS": str(DRAIN_SECONDS)}).start()
    users = ("alice", "bob")
    with ThreadPoolExecutor(max_workers=4) as pool:
        auto = list(
            pool.map(
                lambda i: d.create(users[i % 2], "haiku-writer", web=i % 2, input={"topic": f"zzz{TURN_SECONDS} {i}"}),
                range(AUTO_RUNS),
            )
        )
        asking = list(
            pool.map(
                lambda i: d.create(users[i % 2], "trip-planner", web=i % 2, mode="interactive"), range(INTERACTIVE_RUNS)
            )
        )
    watched, watched_by = asking[0], users[0]
    d.wait_status(watched_by, watched, {"waiting_user"}, timeout=60)
    watcher = Watcher(d, watched_by, watched)
    watcher.start()
    stop_replying = threading.Event()
    replier = threading.Thread(
        target=reply_when_asked,
        args=(d, {r: users[i % 2] for i, r in enumerate(asking) if r != watched}, stop_replying),
    )
    replier.start()
    try:
        workers = [0, 1]
        for position, index in enumerate(workers):
            wait_until(
                lambda: d.db("SELECT count(*) FROM runs_run WHERE status = 'running'")[0][0], 30, "a turn to run"
            )
            workers[position] = restart_worker(d, index)
        for web in range(len(d.webs)):
            process = d.webs[web]
            assert process is not None and d.terminate(process, 15) == 0, d.log(f"web-{web}")[-3000:]
            d.start_web(web)
            d.wait_web(web)
        # Only now is the watched run answered: its socket lived through both webs' restarts.
        code, answer = d.request(
            "POST", f"/v1/jobs/{watched}/interaction/reply", watched_by, {"interaction_id": 1, "response": "Oslo"}
        )
        assert code == 200, answer
        runs = check_all(d, timeout=120)
    finally:
        stop_replying.set()
        replier.join(timeout=30)
    watcher.join(timeout=30)

    assert {rid: run["status"] for rid, run in runs.items() if run["status"] != "succeeded"} == {}
    starts = d.engine.starts_per_run()
    assert {rid: starts[rid] for rid in auto if starts[rid] != 1} == {}  # each auto turn ran once
    assert {rid: starts[rid] for rid in asking if starts[rid] != 2} == {}  # each interactive turn too
    assert watcher.close_codes == [1001, 1001, 1000], watcher.close_codes
    assert_event_log_sound([{"seq": seq, "kind": ""} for seq in watcher.seqs], watched)
    assert watcher.seqs == [e["seq"] for e in d.events("ops", watched)]
