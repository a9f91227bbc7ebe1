"""R-OP2 for real: two daphne web processes and two worker clusters on one PostgreSQL database and
one Redis. Runs are submitted through both web processes; the test counts engine processes per
run and attempt (R-LC14), measures how many turns ran at once against the global cap (R-LC8), and
answers questions through the web process the run was not created on."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import BUNDLED_SKILLS
from tests.scaleout.deployment import Deployment, wait_until
from tests.scaleout.fixtures import QUESTION
from tests.scaleout.invariants import assert_event_log_sound, check_all
from tests.support.wsclient import WebSocket

pytestmark = [pytest.mark.scaleout, pytest.mark.timeout(180)]

CAP = 2
AUTO_RUNS = 16
INTERACTIVE_RUNS = 4


class SlotSampler:
    """Polls the shared database for runs holding a slot and runs in `running`; keeps the maxima."""

    def __init__(self, deployment: Deployment, limit_seconds: float = 150):
        self.deployment = deployment
        self.limit_seconds = limit_seconds
        self.max_slots = self.max_running = self.samples = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(self.deployment.admin_database_url, autocommit=True, connect_timeout=5) as conn:
            for _ in range(int(self.limit_seconds / 0.02)):
                if self.stopped.wait(0.02):
                    return
                slots, running = conn.execute(
                    "SELECT count(*) FILTER (WHERE holds_slot), count(*) FILTER (WHERE status = 'running') FROM runs_run"
                ).fetchone()
                self.max_slots = max(self.max_slots, slots)
                self.max_running = max(self.max_running, running)
                self.samples += 1

    def __enter__(self) -> SlotSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)


def test_two_webs_and_two_worker_clusters_share_runs_without_double_turns_or_extra_slots(deployments):
    d = deployments(webs=2, workers=2, max_turns=CAP).start()
    users = ("alice", "bob")

    with SlotSampler(d) as sampler:
        with ThreadPoolExecutor(max_workers=4) as pool:
            auto = list(
                pool.map(
                    lambda i: d.create(users[i % 2], "haiku-writer", web=i % 2, input={"topic": f"zzz0.3 wave {i}"}),
                    range(AUTO_RUNS),
                )
            )
            asking = list(
                pool.map(
                    lambda i: d.create(users[i % 2], "trip-planner", web=i % 2, mode="interactive"),
                    range(INTERACTIVE_RUNS),
                )
            )

        # Each question is answered through the *other* web process than the one that created the run;
        # the first one is also watched live over a websocket on that other web process.
        replies: dict[str, str] = {}
        watched = asking[0]
        socket = None
        for i, request_id in enumerate(asking):
            user, other_web = users[i % 2], (i + 1) % 2
            waiting = d.wait_status(user, request_id, {"waiting_user"}, timeout=60, web=other_web)
            assert waiting["pending_interaction_id"] == 1
            code, pending = d.request("GET", f"/v1/jobs/{request_id}/interaction/pending", user, web=other_web)
            assert code == 200 and pending["pending"]["prompt"] == QUESTION, pending
            if request_id == watched:
                socket = WebSocket(
                    d.web_ports[0], f"/ws/runs/{request_id}/?after_seq=0", {"Authorization": f"Token {d.tokens[user]}"}
                )
                assert socket.recv()["type"] == "snapshot"
            replies[request_id] = f"Lisbon, {i + 2} days"
            code, body = d.request(
                "POST",
                f"/v1/jobs/{request_id}/interaction/reply",
                user,
                {"interaction_id": 1, "response": replies[request_id], "idempotency_key": f"k{i}"},
                web=other_web,
            )
            assert code == 200 and body["accepted"] is True, body
        streamed = socket.recv_until_closed(timeout=30)
        socket.close()

        runs = check_all(d, timeout=90)
    assert len(runs) == AUTO_RUNS + INTERACTIVE_RUNS

    # Every run finished, each turn reached the engine exactly once (check_all), replies included.
    assert {runs[r]["status"] for r in auto} == {"succeeded"}, {r: runs[r]["error"] for r in auto}
    for request_id in asking:
        assert runs[request_id]["status"] == "succeeded", runs[request_id]
        assert runs[request_id]["attempt_number"] == 2
        assert d.engine.prompts_of(request_id)[1:] == [replies[request_id]]
    assert sum(d.engine.starts_per_run().values()) == AUTO_RUNS + 2 * INTERACTIVE_RUNS

    # The cap holds across both clusters (R-LC8) and was reached, so it was the binding limit.
    assert sampler.samples > 10
    assert sampler.max_slots <= CAP and sampler.max_running <= CAP, (sampler.max_slots, sampler.max_running)
    assert d.engine.max_overlap() == CAP, d.engine.max_overlap()
    clusters = {c["worker"] for c in d.engine.starts()}
    assert clusters == set(range(len(d.workers))), f"turns ran in worker clusters {clusters} only"

    # The socket on web 0 saw the reply posted to web 1 and the worker's events, each once, in order.
    events = [m for m in streamed if m["type"] == "event"]
    assert_event_log_sound(events, watched)
    assert [(e["seq"], e["kind"]) for e in events] == [(e["seq"], e["kind"]) for e in d.events("ops", watched)], (
        f"the socket closed with {socket.close_code}"
    )
    kinds = [e["kind"] for e in events]
    assert "interaction_reply" in kinds and events[-1]["payload"].get("to") == "succeeded", kinds


def test_worker_clusters_starting_together_on_a_fresh_database(deployments):
    """R-OP2 + R-SK6: every worker installs the bundled skills at start (`load_skills`). Three
    workers start at the same moment on an empty database and the shared data dir: each must come
    up, and every installed skill version must keep its snapshot on disk, or its runs fail."""
    d = deployments(webs=1, workers=3, max_turns=CAP)
    d.manage("migrate", "--noinput")
    d.create_tokens(("alice",), ("ops",))
    d.start_web(0)
    for _ in range(3):
        d.start_worker()
    d.wait_web(0)
    for index in range(3):
        wait_until(
            lambda index=index: "started" in d.log(f"worker-{index}") or d.workers[index].poll() is not None,
            30,
            f"worker {index} to start or exit",
        )
    crashed = {
        index: d.log(f"worker-{index}")[-600:] for index, worker in enumerate(d.workers) if worker.poll() is not None
    }
    snapshots = [Path(folder) for (folder,) in d.db("SELECT snapshot_dir FROM skills_skillversion")]
    bundled = sorted(folder.name for folder in BUNDLED_SKILLS.iterdir() if (folder / "SKILL.md").is_file())
    assert len(snapshots) == len(bundled), (snapshots, bundled)  # each bundled skill installed once
    missing = sorted(str(folder) for folder in snapshots if not (folder / "SKILL.md").is_file())
    outcomes = {}
    if len(crashed) < 3:
        request_ids = [d.create("alice", "haiku-writer", input={"topic": f"sea {i}"}) for i in range(2)]
        request_ids.append(d.create("alice", "trip-planner", mode="interactive"))
        for request_id in request_ids:
            done = d.wait_status("alice", request_id, {"succeeded", "failed", "waiting_user"}, timeout=60)
            outcomes[request_id] = (done["status"], (done["error"] or {}).get("message"))
    assert crashed == {}, f"workers exited at start: {crashed}"
    schedules = dict(d.db("SELECT name, count(*) FROM django_q_schedule GROUP BY name"))
    assert schedules == {"skillrunner-run-retention": 1, "skillrunner-temporary-folders": 1}, schedules
    assert missing == [], f"installed skill versions without their snapshot: {missing}"
    assert {status for status, _ in outcomes.values()} <= {"succeeded", "waiting_user"}, outcomes
