"""R-LC13 and R-LC14 on the scale-out configuration (PostgreSQL + Redis, tests/scaleout/deployment.py):
web and worker processes are SIGKILLed, not mocked. tests/end_to_end covers a lone worker killed mid-turn
and restarted on the default configuration; here a surviving peer reaps the dead worker's turn,
a web process dies under a waiting run and its socket, and the whole service dies at once with
runs in every state.

After each: every run ends or waits on an answerable question, event seqs are 1..N, no (run,
attempt) reached the engine twice, no engine process is left, every engine ran sandboxed, no
secret in the server logs. Engines run in the agent sandbox (R-SB1), whose processes are seen
from outside (`assert_engine_sandboxed`)."""

from __future__ import annotations

import os

import pytest

from tests.scaleout.deployment import wait_until
from tests.scaleout.fixtures import QUESTION
from tests.scaleout.invariants import assert_engine_sandboxed, assert_event_log_sound, check_all
from tests.support.wsclient import Closed, WebSocket

pytestmark = [pytest.mark.scaleout, pytest.mark.timeout(150)]


def _engine_start(d, request_id: str) -> dict:
    return wait_until(
        lambda: next((c for c in d.engine.starts() if c["run"] == request_id), None),
        30,
        f"the engine of {request_id} to start",
    )


def test_worker_killed_mid_turn_is_reaped_by_the_surviving_worker(deployments):
    """Two worker clusters; the one running a turn dies, and its sandboxed engine with it (R-SB3).
    Without any restart, the other fails the turn (ORCHESTRATOR_RESTART_INTERRUPTED), never
    reruns it, and keeps taking new runs."""
    d = deployments(webs=1, workers=2, max_turns=2).start()
    long = d.create("alice", "haiku-writer", input={"topic": "zzz60 long"})
    d.wait_status("alice", long, {"running"})
    engine = _engine_start(d, long)
    victim = assert_engine_sandboxed(d, long)
    assert engine["worker"] == victim, (engine, victim)

    d.kill_worker(victim)
    wait_until(lambda: not d.engine_processes_of(long), 20, "the engine to end with its worker")
    failed = d.wait_status("alice", long, {"failed", "succeeded", "canceled"}, timeout=30)
    assert failed["status"] == "failed" and failed["error"]["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED", failed
    assert failed["recovery_state"] == "failed_reconciled"

    later = [d.create("bob", "haiku-writer", input={"topic": f"after {i}"}) for i in range(3)]
    runs = check_all(d)
    assert all(runs[r]["status"] == "succeeded" for r in later), {r: runs[r]["error"] for r in later}
    assert d.engine.starts_per_run()[long] == 1
    assert {c["worker"] for c in d.engine.starts() if c["run"] in later} == {1 - victim}


def test_web_killed_while_a_run_waits(deployments):
    """A browser watches a waiting run over a socket on web 0, which is killed. The socket
    reconnects through web 1 with its last seq; the reply goes through the restarted web 0; the
    run resumes and the socket sees every later event exactly once."""
    d = deployments(webs=2, workers=1).start()
    request_id = d.create("alice", "trip-planner", mode="interactive", web=0)
    d.wait_status("alice", request_id, {"waiting_user"})
    auth = {"Authorization": f"Token {d.tokens['alice']}"}

    socket = WebSocket(d.web_ports[0], f"/ws/runs/{request_id}/?after_seq=0", auth)
    snapshot = socket.recv()
    assert snapshot["type"] == "snapshot" and snapshot["pending"]["prompt"] == QUESTION
    seen = [socket.recv() for _ in range(snapshot["last_seq"])]
    d.kill_web(0)
    with pytest.raises((Closed, OSError)):
        socket.recv(timeout=10)
    socket.close()

    # web 1 still serves the waiting run; the reconnecting socket resumes after its last seq
    code, pending = d.request("GET", f"/v1/jobs/{request_id}/interaction/pending", "alice", web=1)
    assert code == 200 and pending["pending"]["interaction_id"] == 1, pending
    socket = WebSocket(d.web_ports[1], f"/ws/runs/{request_id}/?after_seq={seen[-1]['seq']}", auth)
    assert socket.recv()["type"] == "snapshot"

    d.start_web(0)
    d.wait_web(0)
    code, body = d.request(
        "POST", f"/v1/jobs/{request_id}/interaction/reply", "alice", {"interaction_id": 1, "response": "Bergen"}, web=0
    )
    assert code == 200 and body["accepted"], body
    rest = socket.recv_until_closed(timeout=30)
    socket.close()

    streamed = seen + [m for m in rest if m["type"] == "event"]
    assert_event_log_sound(streamed, request_id)
    history = d.events("alice", request_id)
    assert [(e["seq"], e["kind"]) for e in streamed] == [(e["seq"], e["kind"]) for e in history]
    runs = check_all(d)
    assert runs[request_id]["status"] == "succeeded"
    assert d.engine.prompts_of(request_id)[1:] == ["Bergen"]
    code, body = d.request("GET", f"/v1/jobs/{request_id}/interaction/history", "alice", web=1)
    assert [(i["interaction_id"], i["response"], i["resolution_mode"]) for i in body["interactions"]] == [
        (1, "Bergen", "user_reply")
    ]


def test_everything_killed_at_once_with_runs_in_every_state(deployments):
    """Web and worker die together (SIGKILL) with one run of each kind: succeeded, waiting_user
    (resumable, strict), running, and two queued behind the single slot. The running turn's
    sandboxed engine dies with its worker (R-SB3). After both restart: the running turn fails
    ORCHESTRATOR_RESTART_INTERRUPTED, the queued runs run once each, the waiting run is recovered
    and still answerable, the finished run is untouched (R-LC13)."""
    d = deployments(webs=1, workers=1, max_turns=1).start()
    done = d.create("alice", "haiku-writer", input={"topic": "done before"})
    d.wait_status("alice", done, {"succeeded"})
    waiting = d.create("alice", "trip-planner", mode="interactive")
    d.wait_status("alice", waiting, {"waiting_user"})
    running = d.create("bob", "haiku-writer", input={"topic": "zzz60 interrupted"})
    d.wait_status("bob", running, {"running"})
    _engine_start(d, running)
    assert assert_engine_sandboxed(d, running) == 0
    queued = [d.create("bob", "haiku-writer", input={"topic": f"queued {i}"}) for i in range(2)]
    assert [d.status("bob", r)["status"] for r in queued] == ["queued", "queued"]
    done_events = d.events("alice", done)

    d.kill_worker(0)
    d.kill_web(0)
    wait_until(lambda: not d.engine_processes_of(running), 20, "the engine to end with its worker")
    d.start_web(0)
    d.wait_web(0)
    d.wait_worker(d.start_worker())

    failed = d.wait_status("bob", running, {"failed", "succeeded", "canceled"}, timeout=30)
    assert failed["status"] == "failed" and failed["error"]["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED", failed
    for request_id in queued:
        assert d.wait_status("bob", request_id, {"succeeded", "failed"}, timeout=30)["status"] == "succeeded"

    recovered = d.wait_status("alice", waiting, {"waiting_user"})
    assert recovered["recovery_state"] == "recovered_waiting" and recovered["pending_interaction_id"] == 1, recovered
    code, body = d.request(
        "POST", f"/v1/jobs/{waiting}/interaction/reply", "alice", {"interaction_id": 1, "response": "Tromsø"}
    )
    assert code == 200, body
    runs = check_all(d)
    assert runs[waiting]["status"] == "succeeded"
    assert d.engine.prompts_of(waiting)[1:] == ["Tromsø"]
    assert runs[done]["status"] == "succeeded" and d.events("alice", done) == done_events
    assert {r: n for r, n in d.engine.starts_per_run().items()} == {
        done: 1,
        waiting: 2,
        running: 1,
        queued[0]: 1,
        queued[1]: 1,
    }
    assert os.path.isdir(d.data_dir / "runs" / running)
