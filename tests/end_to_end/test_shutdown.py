"""Stopping `make run`, a worker and a web (R-OP7, R-LC13): however the stop arrives, no process
of the stopped tree is left 10 s later (counted under a subreaper of its own, so nothing escapes
the count by detaching), its claims are released or recovered, and a restart finds each run in
its place.

Runs on the embedded default and, with the rest of tests/end_to_end, on PostgreSQL + Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.fake_codex import FakeCodex
from tests.support.processes import children, describe, process_alive, processes_in
from tests.support.service_processes import ServiceProcesses, with_fake_codex
from tests.support.wsclient import WebSocket

pytestmark = [pytest.mark.timeout(150)]

PLAN = {
    "destination": "Oslo",
    "days": [{"day": 1, "activities": ["fjord"]}],
    "plan_file": "artifacts/plan.md",
    "__SKILL_DONE__": True,
}


# How a stop arrives: each step is a signal and where it goes (ProcessTree.signal), the second
# one while the first is being handled.
STOPS = {
    "TERM": [(signal.SIGTERM, "parent")],
    "INT": [(signal.SIGINT, "parent")],
    "group-TERM": [(signal.SIGTERM, "group")],
    "group-INT": [(signal.SIGINT, "group")],  # Ctrl-C in a terminal
    "tree-TERM": [(signal.SIGTERM, "tree")],  # systemd's KillMode=control-group
    "TERM-twice": [(signal.SIGTERM, "parent"), (signal.SIGTERM, "parent")],
    "group-INT-twice": [(signal.SIGINT, "group"), (signal.SIGINT, "group")],
    "KILL": [(signal.SIGKILL, "parent")],  # a service manager's last resort, or the OOM killer
}
SECOND_SIGNAL_AFTER = 0.2
LEFT_AFTER_SECONDS = 10


def _status(live, token, request_id) -> dict:
    return live.request("GET", f"/v1/jobs/{request_id}", token)[1]


def stacks_of(pids: list[int], log, kind: str) -> str:
    """What the processes left behind were doing: SIGABRT makes each write its threads' stacks
    (PYTHONFAULTHANDLER) to the log, whose end this returns."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGABRT)
    time.sleep(1)
    return log(kind)[-8000:]


def _open_event_stream(live, token, request_id):
    """A client following the run's events: a response the web holds open while the run lasts."""
    req = urllib.request.Request(f"{live.url}/v1/jobs/{request_id}/events")
    req.add_header("Authorization", f"Token {token}")
    stream = urllib.request.urlopen(req, timeout=30)
    assert stream.status == 200
    return stream


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("kind", ["serve", "worker", "web"])
def test_every_stop_leaves_no_process_and_every_run_in_place(tmp_path, kind, stop):
    """R-OP7/R-LC13, for `make run` and for a worker and a web started on their own: one slot; a
    run waits for its user, one runs (its engine sandboxed), one is queued behind it, and a client
    follows the running one's events. However the stop arrives, nothing of the stopped process's
    tree is left 10 s later, and a restart finds each run in its place."""
    (tmp_path / "engine").mkdir()
    fake = FakeCodex(tmp_path / "engine", tmp_path / "data")
    release = tmp_path / "engine" / "release"  # the install dir, which the sandbox shows the engine (read-only)
    # Every thread's first turn asks a question, but only once `release` exists; the second ends.
    fake.script(
        {"message": "Where to?", "wait_for": str(release)},
        {"files": {"artifacts/plan.md": "# plan\n"}, "message": json.dumps(PLAN)},
    )
    live = ServiceProcesses(  # the drain off (ServiceProcesses's default): the running turn never ends on its own
        tmp_path / "data",
        env={"SKILLRUNNER_CODEX_BIN": str(fake.binary), "SKILLRUNNER_MAX_CONCURRENT_TURNS": "1"},
    )
    stream = None
    try:
        token = live.token("alice")
        if kind == "worker":
            live.start_web()
        elif kind == "web":
            live.start_worker()
        tree = live.start_tree(kind)
        live.wait_until(lambda: live._ping() == 204, 60, "the service to answer")
        live.wait_until(lambda: live.readyz() == 200, 60, "the worker to serve")

        release.touch()
        waiting = live.start_trip(token)
        live.wait_for_status(token, waiting, {"waiting_user"})
        release.unlink()
        running = live.start_trip(token)
        live.wait_for_status(token, running, {"running"})
        live.wait_until(lambda: fake.invocations()[1:], 20, "the second engine to start")
        engine = processes_in(tmp_path / "data" / "runs" / running)  # host pids: bwrap and the sandbox's
        assert engine, "the running turn's engine should be running in its run directory"
        host = os.readlink("/proc/self/ns/pid")
        assert [pid for pid in engine if os.readlink(f"/proc/{pid}/ns/pid") != host], "the engine is not sandboxed"
        queued = live.start_trip(token)
        assert _status(live, token, queued)["status"] == "queued"
        stream = _open_event_stream(live, token, running)

        for step, (sig, to) in enumerate(STOPS[stop]):
            if step:
                time.sleep(SECOND_SIGNAL_AFTER)
            tree.signal(sig, to)
        left = tree.wait(LEFT_AFTER_SECONDS)
        assert not left, f"{len(left)} processes left {LEFT_AFTER_SECONDS} s after the stop:\n{describe(left)}\n" + (
            stacks_of(left, live.log, kind)
        )
        assert "Traceback" not in live.log(kind), live.log(kind)[-3000:]

        release.touch()
        {"serve": live.start_serve, "worker": live.start_worker, "web": live.start_web}[kind]()
        live.wait_until(lambda: live._ping() == 204, 60, "the restarted service to answer")
        if kind == "web":  # the web's stop ended no run: the released turn asks its question
            assert live.wait_for_status(token, running, {"waiting_user"})["pending_interaction_id"] == 1
        else:
            interrupted = live.wait_for_status(token, running, {"failed"})
            assert interrupted["error"]["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED", interrupted
        assert live.wait_for_status(token, queued, {"waiting_user"})["pending_interaction_id"] == 1
        assert _status(live, token, waiting)["status"] == "waiting_user"
        code, body = live.request(
            "POST", f"/v1/jobs/{waiting}/interaction/reply", token, {"interaction_id": 1, "response": "Oslo"}
        )
        assert code == 200, body
        assert live.wait_for_status(token, waiting, {"succeeded", "failed"})["status"] == "succeeded"
    finally:
        if stream is not None:
            stream.close()
        live.stop()


def test_a_worker_replaces_its_task_process_when_it_dies(tmp_path):
    """The worker's main process notices at once (it sleeps on the task process's fd, not on a
    timer) and starts another, as django-q2's sentinel replaced a worker process killed for
    memory: the worker goes on serving runs."""
    live = with_fake_codex(tmp_path, {})
    live.fake.script({"message": "Where to?"})
    try:
        live.start()
        worker = live.workers[0]
        live.wait_until_worker_serves("worker-0")
        (killed,) = children(worker.pid)
        os.kill(killed, signal.SIGKILL)
        live.wait_until(lambda: children(worker.pid) not in ([], [killed]), 20, "another task process")
        assert worker.poll() is None, live.log("worker-0")[-3000:]
        token = live.token("alice")
        request_id = live.start_trip(token)
        live.wait_for_status(token, request_id, {"waiting_user"})
        assert "the task process ended on its own (exit status -9); starting another" in live.log("worker-0")
    finally:
        live.stop()


def test_a_worker_whose_cluster_hangs_still_stops_in_time(tmp_path):
    """A cluster that does not wind down (here its task process is frozen) is killed with
    everything below it once the worker's grace period (SKILLRUNNER_KILL_GRACE_SECONDS + 3 s) is
    over."""
    live = ServiceProcesses(tmp_path / "data", env={"SKILLRUNNER_KILL_GRACE_SECONDS": "1"})
    try:
        tree = live.start_tree("worker")
        live.wait_until_worker_serves("worker")
        (task_process,) = children(tree.pid)
        os.kill(task_process, signal.SIGSTOP)
        tree.signal(signal.SIGTERM, "parent")
        left = tree.wait(LEFT_AFTER_SECONDS)
        assert not left, f"{len(left)} processes left {LEFT_AFTER_SECONDS} s after the stop:\n{describe(left)}"
        assert "the task cluster did not stop in time" in live.log("worker")
    finally:
        live.stop()


def test_serve_stops_everything_when_one_of_its_children_dies(tmp_path):
    """`make run` forks web and worker, then waits for them as a Django-free parent: the web's
    death stops the worker and its cluster too, and the parent exits non-zero for a process
    manager to see."""
    live = ServiceProcesses(tmp_path / "data")
    try:
        serve = live.start_serve()
        live.wait_until(lambda: live._ping() == 204, 60, "the service to answer")
        cmdline = Path(f"/proc/{serve.pid}/cmdline")
        live.wait_until(lambda: b"processes/serve_parent.py" in cmdline.read_bytes(), 10, "serve to exec its parent")
        web, worker = children(serve.pid)  # forked in this order
        live.wait_until_worker_serves("serve")
        service = [web, worker, *children(worker)]
        os.kill(web, signal.SIGKILL)
        try:
            assert serve.wait(timeout=40) == 1
        except subprocess.TimeoutExpired:
            pytest.fail("serve outlived its web process:\n" + live.log("serve")[-3000:])
        live.wait_until(lambda: not any(process_alive(pid) for pid in service), 10, "every process to end")
    finally:
        live.stop()


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="the web's PostgreSQL connection pool"
)
def test_the_web_that_serve_forked_reconnects_when_the_database_drops_its_connections(tmp_path):
    """serve migrates before it forks the web: the web's connection pool must be its own (a pool
    made before the fork would have no threads to open new connections in the child)."""
    import psycopg

    live = ServiceProcesses(tmp_path / "data")
    try:
        token = live.token("alice")
        live.start_serve()
        live.wait_until(lambda: live._ping() == 204, 60, "the service to answer")
        assert live.request("GET", "/v1/jobs", token)[0] == 200
        server, name = live.database_url.rsplit("/", 1)
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            dropped = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone()
        assert dropped and dropped[0] >= 1
        live.wait_until(lambda: live.request("GET", "/v1/jobs", token)[0] == 200, 30, "the web to reconnect")
    finally:
        live.stop()


@pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="PostgreSQL's backends")
def test_a_worker_whose_connection_drops_while_it_recovers_waits_for_the_database(tmp_path):
    """The worker's start-up (restart recovery) reads the runs table: a lock held here stops it
    there, so dropping every connection then hits it mid-recovery every time. Before, the worker
    died of it, and serve stopped the web with it."""
    import psycopg

    live = ServiceProcesses(tmp_path / "data")
    try:
        token = live.token("alice")
        with psycopg.connect(live.database_url) as admin:
            admin.execute("LOCK TABLE runs_run IN ACCESS EXCLUSIVE MODE")
            serve = live.start_serve()

            def blocked_on_the_lock() -> int:
                admin.execute("SELECT pg_stat_clear_snapshot()")  # else one view per transaction
                return admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                ).fetchone()[0]

            live.wait_until(blocked_on_the_lock, 60, "the worker's recovery to wait on the runs table")
            dropped = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            assert dropped and dropped[0] >= 1
        live.wait_until(lambda: live.readyz() == 200 or serve.poll() is not None, 60, "the worker to recover")
        assert serve.poll() is None, "serve ended with its worker:\n" + live.log("serve")[-3000:]
        assert live.request("GET", "/v1/jobs", token)[0] == 200
    finally:
        live.stop()


# R-OP10: (drain seconds, the running turn's length, stop signals, the run's status afterwards).
DRAINS = {
    "the turn finishes": (20, 3, 1, "waiting_user"),
    "the turn outlasts the drain": (1, 30, 1, "failed"),
    "a second signal": (60, 30, 2, "failed"),
}


@pytest.mark.parametrize(
    "kind, case",
    [("worker", case) for case in DRAINS] + [("serve", "the turn finishes"), ("serve", "a second signal")],
)
def test_a_stopping_worker_drains_its_running_turn(tmp_path, kind, case):
    """R-OP10: SIGTERM a second into a turn. The worker takes no more turns and says `draining`
    (/readyz) while the turn runs; a turn that ends within SKILLRUNNER_DRAIN_SECONDS is recorded as
    usual (its question asked, the run waiting) and the process ends right after it. One that
    outlasts the drain, or a second signal, ends the drain at once: the turn fails
    ORCHESTRATOR_RESTART_INTERRUPTED. Either way nothing of the stopped tree is left, and a run
    queued behind the turn waits, untouched, for the next worker."""
    drain, turn_seconds, signals, outcome = DRAINS[case]
    (tmp_path / "engine").mkdir()
    fake = FakeCodex(tmp_path / "engine", tmp_path / "data")
    fake.script({"sleep": turn_seconds, "message": "Where to?"}, {"message": json.dumps(PLAN)})
    live = ServiceProcesses(
        tmp_path / "data",
        env={
            "SKILLRUNNER_CODEX_BIN": str(fake.binary),
            "SKILLRUNNER_MAX_CONCURRENT_TURNS": "1",
            "SKILLRUNNER_DRAIN_SECONDS": str(drain),
            "SKILLRUNNER_KILL_GRACE_SECONDS": "1",
        },
    )
    try:
        token = live.token("alice")
        if kind == "worker":
            live.start_web()
        tree = live.start_tree(kind)
        live.wait_until(lambda: live.readyz() == 200, 60, "the worker to serve")
        running = live.start_trip(token)
        live.wait_until(lambda: fake.invocations(), 20, "the engine to start")
        engine_seen = time.monotonic()  # the turn started at most a polling round before
        queued = live.start_trip(token)
        time.sleep(1)
        stopped_at = time.monotonic()
        tree.signal(signal.SIGTERM, "parent")
        if kind == "worker":
            live.wait_until(lambda: live._readiness().get("worker") == "draining", 5, "/readyz to say draining")
        for _ in range(signals - 1):
            time.sleep(SECOND_SIGNAL_AFTER)
            tree.signal(signal.SIGTERM, "parent")
        left = tree.wait(turn_seconds + LEFT_AFTER_SECONDS)
        assert not left, f"{len(left)} processes left after the stop:\n{describe(left)}\n" + stacks_of(
            left, live.log, kind
        )
        ended = time.monotonic()
        took = ended - stopped_at
        assert "Traceback" not in live.log(kind), live.log(kind)[-3000:]
        assert f"draining (up to {drain} s)" in live.log(kind)
        assert len(fake.invocations()) == 1, "a draining worker took another turn"

        if kind == "serve":
            live.start_web()  # to read the runs
            live.wait_web(60)
        after = _status(live, token, running)
        assert after["status"] == outcome, after
        if outcome == "failed":
            assert after["error"]["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED", after
            # Neither the turn nor (after a second signal) the drain was waited out: the stop is
            # bounded by the drain, then SKILLRUNNER_KILL_GRACE_SECONDS + 3 s.
            assert took < min(drain + 6, turn_seconds / 2), f"the stop took {took:.1f} s"
        else:
            assert after["pending_interaction_id"] == 1
            # Not before the turn had run its time (measured from when its engine was seen, not
            # from the signal a second or so later), and within the drain.
            assert ended - engine_seen >= turn_seconds - 0.5, f"the stop took {took:.1f} s"
            assert took < drain, f"the stop took {took:.1f} s"
        assert _status(live, token, queued)["status"] == "queued"
    finally:
        live.stop()


def test_a_stopping_web_closes_its_sockets_with_going_away(tmp_path):
    """R-OP10: SIGTERM to a web process closes each of its websockets with 1001 (the client
    reconnects to another web process and resumes from its last seq) before the process ends."""
    (tmp_path / "engine").mkdir()
    fake = FakeCodex(tmp_path / "engine", tmp_path / "data")
    fake.script({"message": "Where to?"})
    live = ServiceProcesses(tmp_path / "data", env={"SKILLRUNNER_CODEX_BIN": str(fake.binary)})
    try:
        token = live.token("alice")
        live.start_worker()
        tree = live.start_tree("web")
        live.wait_until(lambda: live.readyz() == 200, 60, "the service to serve")
        waiting = live.start_trip(token)
        live.wait_for_status(token, waiting, {"waiting_user"})
        headers = {"Authorization": f"Token {token}"}
        run_socket = WebSocket(live.port, f"/ws/runs/{waiting}/?after_seq=0", headers)
        assert run_socket.recv()["type"] == "snapshot"
        inbox = WebSocket(live.port, "/ws/inbox/", headers)
        assert inbox.recv()["type"] == "inbox"
        tree.signal(signal.SIGTERM, "parent")
        for socket in (run_socket, inbox):
            socket.recv_until_closed(timeout=10)
            assert socket.close_code == 1001
            socket.close()
        assert not tree.wait(LEFT_AFTER_SECONDS)
        assert "Traceback" not in live.log("web"), live.log("web")[-3000:]
    finally:
        live.stop()
