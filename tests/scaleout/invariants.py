"""What must hold after any mix of process deaths (R-LC13, R-LC14, R-UI1), checked the same way
by the scale-out and the fault tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.scaleout.deployment import TERMINAL, Deployment, wait_until
from tests.support.processes import parent


def settled(deployment: Deployment) -> dict[str, dict] | None:
    """Every run is terminal or waits on an answerable question; None while some are in between."""
    runs = deployment.runs()
    for run in runs.values():
        if run["status"] in TERMINAL:
            continue
        if run["status"] == "waiting_user" and run["pending_interaction_id"] is not None:
            continue
        return None
    return runs


def wait_settled(deployment: Deployment, timeout: float = 60) -> dict[str, dict]:
    try:
        return wait_until(lambda: settled(deployment), timeout, "every run to end or wait on a question", interval=0.5)
    except AssertionError:
        stuck = {rid: (r["status"], r["error"]) for rid, r in deployment.runs().items() if r["status"] not in TERMINAL}
        raise AssertionError(f"runs stuck without a cause: {stuck}\n{deployment.tail_logs()}") from None


def assert_event_log_sound(events: list[dict[str, Any]], request_id: str = "") -> None:
    """seq is exactly 1..N (nothing lost, nothing twice) and the status chain is unbroken."""
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1)), (request_id, seqs)
    previous = None
    for event in events:
        if event["kind"] == "status":
            assert event["payload"]["from"] == previous, (request_id, event, previous)
            previous = event["payload"]["to"]


def assert_every_event_log_sound(deployment: Deployment, runs: dict[str, dict]) -> dict[str, list[dict]]:
    logs = {rid: deployment.events("ops", rid) for rid in runs}
    for rid, events in logs.items():
        assert_event_log_sound(events, rid)
        last_status = [e for e in events if e["kind"] == "status"][-1]["payload"]["to"]
        assert last_status == runs[rid]["status"], (rid, last_status, runs[rid]["status"])
    return logs


def assert_interactions_complete(deployment: Deployment, runs: dict[str, dict], events: dict[str, list[dict]]) -> None:
    """R-LC6: every question asked is in the history once, and every answer in it has its event."""
    for rid, run in runs.items():
        if run["execution_mode"] != "interactive":
            continue
        code, body = deployment.request("GET", f"/v1/jobs/{rid}/interaction/history", "ops")
        assert code == 200, (code, body)
        history = body["interactions"]
        kinds = [e["kind"] for e in events[rid]]
        assert len(history) == run["interaction_count"] == kinds.count("interaction_pending"), (
            rid,
            len(history),
            run["interaction_count"],
            kinds,
        )
        answered = [i for i in history if i["resolution_mode"]]
        assert len(answered) == kinds.count("interaction_reply"), (rid, history, kinds)
        assert [i["interaction_id"] for i in history] == sorted({i["interaction_id"] for i in history}), (rid, history)


def assert_no_turn_ran_twice(deployment: Deployment) -> None:
    """R-LC14: each (run, attempt) reached the engine at most once, whatever was redelivered."""
    twice = {key: count for key, count in deployment.engine.turns_per_attempt().items() if count > 1}
    assert twice == {}, twice


def assert_attempts_match_engine_turns(deployment: Deployment, runs: dict[str, dict]) -> None:
    """A run's attempt_number counts its turns: every attempt that started a process ran once,
    and no process ran for an attempt the run never had."""
    turns = deployment.engine.turns_per_attempt()
    for rid, run in runs.items():
        mine = sorted(turn for (run_id, turn) in turns if run_id == rid)
        assert mine == list(range(len(mine))), (rid, mine)
        assert len(mine) <= run["attempt_number"], (rid, mine, run["attempt_number"])


def assert_no_orphan_engines(deployment: Deployment, timeout: float = 15) -> None:
    """No engine process outlives the turn it belonged to (every run is settled by now)."""
    wait_until(
        lambda: not deployment.engine_processes(),
        timeout,
        f"engine processes {deployment.engine_processes()} to be gone",
    )


def assert_every_engine_sandboxed(deployment: Deployment) -> None:
    """R-SB1/R-SB3: every engine process that started ran in a PID namespace of its own, not in the
    one of the service's processes (this test process's, where the deployment starts them)."""
    host = os.readlink("/proc/self/ns/pid")
    unconfined = [(c["run"], c["turn"]) for c in deployment.engine.starts() if c["pid_namespace"] in (None, host)]
    assert unconfined == [], unconfined


def _pid_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def assert_engine_sandboxed(deployment: Deployment, request_id: str) -> int:
    """R-SB3 seen from outside, while the run's turn is running: the pid the worker stored
    (bwrap, started by the worker) is a child of one worker cluster's process, every other process
    in the run directory is in another PID namespace than that worker, and the probe is among
    them. Returns the index of that worker cluster."""
    stored = wait_until(
        lambda: deployment.db("SELECT engine_pid FROM runs_run WHERE request_id = %s", (request_id,))[0][0],
        20,
        f"the engine pid of {request_id} to be recorded",
    )
    spawner = parent(stored)
    worker = deployment.worker_index_of_group(os.getpgid(spawner))
    assert worker is not None, (stored, spawner, [w.pid for w in deployment.workers])
    inside = [pid for pid in deployment.engine_processes_of(request_id) if pid != stored]
    worker_namespace = _pid_namespace(spawner)
    assert worker_namespace == _pid_namespace(deployment.workers[worker].pid)
    assert [pid for pid in inside if _pid_namespace(pid) == worker_namespace] == [], inside
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in inside]
    assert any(b"probe_engine.py" in arg for command in commands for arg in command), commands
    assert Path(os.readlink(f"/proc/{stored}/exe")).name == "bwrap", os.readlink(f"/proc/{stored}/exe")
    return worker


def assert_no_secret_in(texts: dict[str, str], secrets: dict[str, str]) -> None:
    leaks = [
        (where, name) for where, text in texts.items() for name, value in secrets.items() if value and value in text
    ]
    assert leaks == [], leaks


def assert_logs_clean(deployment: Deployment) -> None:
    """Server log output (web, worker) never carries a secret (README: LOG_LEVEL, redaction)."""
    logs = {name: text for name, text in deployment.all_logs().items() if name != "manage"}
    assert_no_secret_in(logs, deployment.secrets)


def check_all(deployment: Deployment, timeout: float = 60) -> dict[str, dict]:
    """The common ending of every scale-out and fault test."""
    runs = wait_settled(deployment, timeout)
    events = assert_every_event_log_sound(deployment, runs)
    assert_interactions_complete(deployment, runs, events)
    assert_no_turn_ran_twice(deployment)
    assert_attempts_match_engine_turns(deployment, runs)
    assert_no_orphan_engines(deployment)
    assert_every_engine_sandboxed(deployment)
    assert_logs_clean(deployment)
    return runs
