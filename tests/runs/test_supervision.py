"""runs.supervision: wait deadlines (R-LC9, R-LC10) and recovery when processes die (R-LC13).

The runs are driven through runs.services exactly as a worker would; dispatch is recorded instead of
executed, so nothing here starts an engine.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engines.types import TurnResult
from runs import services, supervision
from runs.models import Interaction, Run
from runs.outcome import TurnDecision, build_pending
from skills.models import Skill
from tests.support.jobs import process_alive, wait_until
from worker.execution import CLAIM_POLL_SECONDS, ClaimControl
from worker.management.commands.worker import Command as WorkerCommand

pytestmark = pytest.mark.django_db

HOST = socket.gethostname()


@pytest.fixture(autouse=True)
def setup(install_skill, monkeypatch, settings):
    install_skill("haiku-writer")
    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 0.5
    enqueued: list[tuple[str, int]] = []
    monkeypatch.setattr("runs.task_queue.enqueue_turn", lambda rid, attempt: enqueued.append((str(rid), attempt)))
    return enqueued


@pytest.fixture
def enqueued(setup):
    return setup


@pytest.fixture
def sleeper():
    """A process in its own group standing in for an engine; killed at teardown whatever happens."""
    procs = []

    def start(ignoring_sigterm: bool = False) -> subprocess.Popen:
        command = "trap '' TERM; sleep 60" if ignoring_sigterm else "exec sleep 60"
        proc = subprocess.Popen(["sh", "-c", command], start_new_session=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _create(alice, engine="codex", **options) -> Run:
    return services.create_run(
        owner=alice,
        skill_id="haiku-writer",
        engine=engine,
        model=None,
        input={"topic": "sea"},
        parameter={},
        runtime_options={"execution_mode": "interactive", **options},
    )


def _running(run: Run, worker: str) -> Run:
    claimed = services.claim_turn(run.pk, run.attempt_number, worker)
    assert claimed is not None
    return claimed


def _waiting(run: Run, worker: str, *, handle: str | None = "thread-1") -> Run:
    run = _running(run, worker)
    turn = TurnResult(outcome="ask_user", assistant_text="Which season?", session_handle=handle, exit_code=0)
    pending, warnings = build_pending(turn, run.attempt_number)
    updated = services.complete_turn(
        run.pk, run.attempt_number, worker, turn, TurnDecision("waiting_user", pending=pending, warnings=warnings)
    )
    assert updated is not None and updated.status == "waiting_user"
    return Run.objects.get(pk=run.pk)


def _live_worker() -> str:
    return f"{HOST}:{os.getpid()}:test"


def _past(run: Run, seconds: int = 5) -> None:
    Run.objects.filter(pk=run.pk).update(wait_deadline_at=timezone.now() - timedelta(seconds=seconds))


# --- wait deadlines (R-LC9, R-LC10) ----------------------------------------------------------


def test_strict_resumable_run_waits_forever(alice):
    run = _waiting(_create(alice, session_timeout_sec=1), _live_worker())
    assert run.wait_deadline_at is None
    assert supervision.expire_waits() == 0
    assert Run.objects.get(pk=run.pk).status == "waiting_user"


def test_deadline_is_persisted(alice):
    before = timezone.now()
    run = _waiting(_create(alice, interactive_require_user_reply=False, session_timeout_sec=300), _live_worker())
    assert before + timedelta(seconds=299) <= run.wait_deadline_at <= timezone.now() + timedelta(seconds=301)


def test_deadline_not_reached_changes_nothing(alice):
    run = _waiting(_create(alice, interactive_require_user_reply=False, session_timeout_sec=300), _live_worker())
    assert supervision.expire_waits() == 0
    assert Run.objects.get(pk=run.pk).status == "waiting_user"


def test_non_strict_resumable_run_auto_decides(alice, enqueued):
    """R-LC9 + R-LC10: the backend answers on the user's behalf and starts the next turn."""
    run = _waiting(_create(alice, interactive_require_user_reply=False, session_timeout_sec=60), _live_worker())
    _past(run)
    assert supervision.expire_waits() == 1
    run = Run.objects.get(pk=run.pk)
    assert run.status == "queued"
    assert run.attempt_number == 2
    assert run.auto_decision_count == 1
    assert run.pending_interaction_id is None
    interaction = Interaction.objects.get(run=run, interaction_id=1)
    assert interaction.resolution_mode == "auto_decide_timeout"
    assert interaction.answered_by is None
    assert "engine_judgement" in interaction.response
    assert run.next_prompt == interaction.response
    assert supervision.expire_waits() == 0  # fires once


def test_auto_decision_follows_the_pending_policy(alice):
    run = _running(_create(alice, interactive_auto_reply=True, session_timeout_sec=60), _live_worker())
    turn = TurnResult(outcome="ask_user", assistant_text="x", session_handle="t", exit_code=0)
    pending, _ = build_pending(turn, 1)
    pending["default_decision_policy"] = "prefer_cheapest_option"
    services.complete_turn(run.pk, 1, _live_worker(), turn, TurnDecision("waiting_user", pending=pending))
    _past(run)
    supervision.expire_waits()
    assert "prefer_cheapest_option" in Interaction.objects.get(run=run).response


def test_strict_sticky_run_fails_on_timeout(alice):
    """R-LC9: sticky_process + strict → INTERACTION_WAIT_TIMEOUT."""
    run = _waiting(_create(alice, engine="claude", session_timeout_sec=60), _live_worker())
    assert run.interactive_profile == "sticky_process"
    assert run.wait_deadline_at is not None
    _past(run)
    assert supervision.expire_waits() == 1
    run = Run.objects.get(pk=run.pk)
    assert run.status == "failed"
    assert run.error["code"] == "INTERACTION_WAIT_TIMEOUT"
    assert run.holds_slot is False


def test_non_strict_sticky_run_gets_the_auto_decision(alice):
    run = _waiting(
        _create(alice, engine="claude", interactive_require_user_reply=False, session_timeout_sec=60), _live_worker()
    )
    _past(run)
    assert supervision.expire_waits() == 1
    run = Run.objects.get(pk=run.pk)
    assert run.status in ("running", "queued")
    assert run.status != "failed"
    assert Interaction.objects.get(run=run).resolution_mode == "auto_decide_timeout"


def test_reply_and_deadline_race_has_one_winner(alice):
    run = _waiting(_create(alice, interactive_require_user_reply=False, session_timeout_sec=60), _live_worker())
    services.submit_reply(run, user=alice, interaction_id=1, response="winter")
    _past(run)
    assert supervision.expire_waits() == 0
    interaction = Interaction.objects.get(run=run, interaction_id=1)
    assert (interaction.response, interaction.resolution_mode) == ("winter", "user_reply")


# --- dead claims and restarts (R-LC13) -------------------------------------------------------


def test_running_turn_of_a_dead_worker_fails_and_its_engine_is_killed(alice, sleeper):
    engine = sleeper()
    run = _running(_create(alice), f"{HOST}:{_dead_pid()}:gone")
    services.record_engine_pid(run.pk, 1, run.claimed_by, engine.pid)
    assert supervision.reap_dead_claims() == 1
    run = Run.objects.get(pk=run.pk)
    assert run.status == "failed"
    assert run.error["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED"
    assert run.recovery_state == "failed_reconciled"
    assert run.holds_slot is False
    assert wait_until(lambda: not process_alive(engine.pid), timeout=3)


def _repair_round(run: Run, worker: str) -> Run:
    """The first answer failed the schema: the run is queued for repair round 1 (R-RP1)."""
    run = _running(run, worker)
    decision = TurnDecision(
        "repairing", error={"code": "OUTPUT_SCHEMA_INVALID", "message": "bad"}, repair_prompt="fix /haiku"
    )
    turn = TurnResult(outcome="final", final_data={}, session_handle="thread-1", exit_code=0)
    services.complete_turn(run.pk, 1, worker, turn, decision)
    return Run.objects.get(pk=run.pk)


def test_an_interrupted_repair_round_fails_as_an_interrupted_turn_does(alice, sleeper, enqueued):
    """R-RP1 + R-LC13: a repair round running in a dead worker fails ORCHESTRATOR_RESTART_INTERRUPTED;
    one still waiting for its slot is dispatched again at worker start."""
    run = _repair_round(_create(alice, execution_mode="auto"), _live_worker())
    assert (run.status, run.attempt_number, run.repair_round, run.next_prompt) == ("queued", 2, 1, "fix /haiku")
    enqueued.clear()
    supervision.recover_on_worker_start()
    assert (str(run.pk), 2) in enqueued

    engine = sleeper()
    run = _running(run, f"{HOST}:{_dead_pid()}:gone")
    services.record_engine_pid(run.pk, 2, run.claimed_by, engine.pid)
    assert supervision.reap_dead_claims() == 1
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.error["code"], run.repair_round) == ("failed", "ORCHESTRATOR_RESTART_INTERRUPTED", 1)
    assert wait_until(lambda: not process_alive(engine.pid), timeout=3)


def test_running_turn_of_a_live_worker_is_left_alone(alice):
    run = _running(_create(alice), _live_worker())
    assert supervision.reap_dead_claims() == 0
    assert Run.objects.get(pk=run.pk).status == "running"


def test_a_live_worker_of_this_host_keeps_its_claim_while_it_may_still_record_its_outcome(alice, settings):
    """After a database outage a live worker's heartbeat is old, but it is about to record the
    turn's outcome: only past the outcome's retry time does this host's reaper take the claim."""
    from runs.supervision import OUTCOME_RETRY_SECONDS, stale_claim_seconds

    settings.SKILLRUNNER_HEARTBEAT_SECONDS = 1
    recording = _running(_create(alice), _live_worker())
    hung = _running(_create(alice), _live_worker())
    now = timezone.now()
    Run.objects.filter(pk=recording.pk).update(heartbeat_at=now - timedelta(seconds=stale_claim_seconds() + 5))
    Run.objects.filter(pk=hung.pk).update(
        heartbeat_at=now - timedelta(seconds=stale_claim_seconds() + OUTCOME_RETRY_SECONDS + 5)
    )
    assert supervision.reap_dead_claims() == 1
    assert Run.objects.get(pk=recording.pk).status == "running"
    assert Run.objects.get(pk=hung.pk).error["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED"


def test_other_host_claims_are_judged_by_heartbeat(alice, settings):
    settings.SKILLRUNNER_HEARTBEAT_SECONDS = 10
    fresh = _running(_create(alice), "elsewhere:123:tok")
    stale = _running(_create(alice), "elsewhere:456:tok")
    Run.objects.filter(pk=stale.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert supervision.reap_dead_claims() == 1
    assert Run.objects.get(pk=fresh.pk).status == "running"
    assert Run.objects.get(pk=stale.pk).error["code"] == "ORCHESTRATOR_RESTART_INTERRUPTED"


def test_sticky_wait_with_a_lost_process_fails(alice):
    run = _waiting(_create(alice, engine="claude"), f"{HOST}:{_dead_pid()}:gone")
    assert supervision.reap_dead_claims() == 1
    run = Run.objects.get(pk=run.pk)
    assert run.status == "failed"
    assert run.error["code"] == "INTERACTION_PROCESS_LOST"


def test_worker_start_recovery(alice, enqueued):
    """R-LC13 on worker start: resumable waits with a session survive, waits without one fail,
    queued runs are dispatched again."""
    keeps = _waiting(_create(alice), _live_worker(), handle="thread-keep")
    loses = _waiting(_create(alice), _live_worker(), handle="thread-x")
    Run.objects.filter(pk=loses.pk).update(session_handle="")
    queued = _create(alice)
    enqueued.clear()

    supervision.recover_on_worker_start()

    keeps = Run.objects.get(pk=keeps.pk)
    assert keeps.status == "waiting_user"
    assert keeps.recovery_state == "recovered_waiting"
    loses = Run.objects.get(pk=loses.pk)
    assert loses.status == "failed"
    assert loses.error["code"] == "SESSION_RESUME_FAILED"
    assert (str(queued.pk), 1) in enqueued
    assert Run.objects.get(pk=queued.pk).status == "queued"
    # The recovered run still takes its reply.
    services.submit_reply(keeps, user=alice, interaction_id=1, response="spring")
    assert Run.objects.get(pk=keeps.pk).status == "queued"


def test_worker_start_installs_the_skills_folder_unless_serve_just_did(settings, tmp_path):
    """A worker started on its own installs the skills folder (R-SK6); the one `serve` forks does
    not, since `serve` installed it a moment before."""
    settings.SKILLRUNNER_SKILLS_DIR = tmp_path / "no-extra-skills"
    assert not Skill.objects.filter(skill_id="study-notes").exists()

    WorkerCommand()._recover(load_skills=False)
    assert not Skill.objects.filter(skill_id="study-notes").exists()

    WorkerCommand()._recover(load_skills=True)
    assert Skill.objects.filter(skill_id="study-notes").exists()


def test_the_worker_installs_the_skills_folder_unless_told_serve_did():
    parser = WorkerCommand().create_parser("manage.py", "worker")
    assert parser.parse_args([]).load_skills is True
    assert parser.parse_args(["--no-load-skills"]).load_skills is False


def test_recovered_wait_still_has_its_deadline(alice):
    run = _waiting(_create(alice, interactive_require_user_reply=False, session_timeout_sec=60), _live_worker())
    supervision.recover_on_worker_start()
    assert Run.objects.get(pk=run.pk).recovery_state == "recovered_waiting"
    _past(run)
    assert supervision.expire_waits() == 1
    assert Run.objects.get(pk=run.pk).auto_decision_count == 1


def test_recovery_is_idempotent(alice):
    run = _waiting(_create(alice), _live_worker())
    supervision.recover_on_worker_start()
    seq = Run.objects.get(pk=run.pk).last_event_seq
    supervision.recover_on_worker_start()
    assert Run.objects.get(pk=run.pk).last_event_seq == seq


def test_release_own_claims_on_shutdown(alice, sleeper):
    engine = sleeper()
    mine = _running(_create(alice), f"{HOST}:{os.getpid()}:cluster-a")
    services.record_engine_pid(mine.pk, 1, mine.claimed_by, engine.pid)
    theirs = _running(_create(alice), f"{HOST}:{os.getpid()}:cluster-b")
    supervision.release_own_claims("cluster-a")
    assert Run.objects.get(pk=mine.pk).status == "failed"
    assert Run.objects.get(pk=theirs.pk).status == "running"
    assert wait_until(lambda: not process_alive(engine.pid), timeout=3)


def test_a_stopping_worker_kills_its_engines_in_one_grace_period(alice, sleeper, settings):
    """Engines that ignore SIGTERM are killed after the grace period: one for all of a worker's
    turns, so a stop takes the grace period however many turns ran (not that times each)."""
    settings.SKILLRUNNER_KILL_GRACE_SECONDS = 1.0
    claim = f"{HOST}:{os.getpid()}:cluster-a"
    engines = [sleeper(ignoring_sigterm=True) for _ in range(3)]
    for engine in engines:
        run = _running(_create(alice), claim)
        services.record_engine_pid(run.pk, 1, claim, engine.pid)
    started = time.monotonic()
    supervision.release_own_claims("cluster-a")
    assert time.monotonic() - started < 2 * settings.SKILLRUNNER_KILL_GRACE_SECONDS
    assert all(engine.wait(timeout=5) == -signal.SIGKILL for engine in engines)


def test_supervise_once_dispatches_queued_runs_within_free_slots(alice, enqueued, settings):
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    first, second = _create(alice), _create(alice)
    enqueued.clear()
    supervision.supervise_once()
    assert enqueued == [(str(first.pk), 1)]
    _running(first, _live_worker())
    enqueued.clear()
    supervision.supervise_once()
    assert enqueued == []
    assert Run.objects.get(pk=second.pk).status == "queued"


@pytest.mark.django_db(transaction=True)  # the control closes the connection after a database error
def test_engine_pid_unrecorded_in_a_database_outage_is_recorded_at_the_next_claim_check(alice, monkeypatch, tmp_path):
    """R-LC13: an engine spawned while the database is away keeps running, and its pid still
    reaches the run, so a reaper can kill it if this worker dies later."""
    run = _running(_create(alice), _live_worker())
    control = ClaimControl(run.pk, 1, run.claimed_by, tmp_path, None)
    record = services.record_engine_pid

    def database_away(*args):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(services, "record_engine_pid", database_away)
    control.on_spawn(4242)  # must not raise: the engine is already running
    assert Run.objects.get(pk=run.pk).engine_pid is None
    monkeypatch.setattr(services, "record_engine_pid", record)
    time.sleep(CLAIM_POLL_SECONDS)  # the next claim check
    assert control.should_abort() is False
    assert Run.objects.get(pk=run.pk).engine_pid == 4242
    control.end_turn()


@pytest.mark.django_db(transaction=True)
def test_a_claim_is_checked_a_poll_after_it_was_taken_not_at_once(alice, tmp_path):
    """The claim was just taken when the engine starts: a turn shorter than CLAIM_POLL_SECONDS
    asks nothing of the database, and a longer one notices a lost claim at its next check."""
    run = _running(_create(alice), _live_worker())
    control = ClaimControl(run.pk, 1, run.claimed_by, tmp_path, None)
    Run.objects.filter(pk=run.pk).update(claimed_by="someone-else:1:x")
    with CaptureQueriesContext(connection) as captured:
        assert control.should_abort() is False
    assert captured.captured_queries == []
    time.sleep(CLAIM_POLL_SECONDS)
    assert control.should_abort() is True
    control.end_turn()


@pytest.mark.parametrize(
    ("engine", "profile", "kept_pid"), [("claude", "sticky_process", 4242), ("codex", "resumable", None)]
)
def test_a_resident_process_pid_unrecorded_until_the_turn_end_is_saved_with_the_wait(alice, engine, profile, kept_pid):
    """R-LC13: the database away from a sticky process's start to its turn's end: the pid is
    written in the turn end's own transaction, so no moment has the run waiting without it. A
    resumable run's process has exited by then, and its run keeps no pid."""
    run = _running(_create(alice, engine=engine), _live_worker())
    assert run.interactive_profile == profile
    turn = TurnResult(outcome="ask_user", assistant_text="Which season?", session_handle="thread-1", exit_code=0)
    pending, _ = build_pending(turn, 1)
    waiting = services.complete_turn(
        run.pk, 1, run.claimed_by, turn, TurnDecision("waiting_user", pending=pending), unrecorded_pid=4242
    )
    assert waiting is not None and waiting.status == "waiting_user"
    assert Run.objects.get(pk=run.pk).engine_pid == kept_pid


@pytest.mark.django_db(transaction=True)  # the supervisor thread reads through its own connection
def test_the_supervisor_ticks_slowly_while_nothing_can_come_due(alice, monkeypatch):
    """#16: idle, a check every idle_interval and nothing supervised; once a run is unfinished,
    a supervised tick every interval."""
    import threading

    ticks: list[float] = []
    checks: list[bool] = []
    monkeypatch.setattr(supervision, "supervise_once", lambda: ticks.append(1))
    pending = supervision.has_pending_work
    monkeypatch.setattr(supervision, "has_pending_work", lambda: checks.append(pending()) or checks[-1])
    stop = threading.Event()
    thread = supervision.start_supervisor(stop, interval=0.02, idle_interval=30)
    try:
        assert wait_until(lambda: len(checks) == 1, timeout=5)
        stop.wait(0.3)
        assert checks == [False]  # asleep for the idle interval
        assert ticks == []  # nothing pending: nothing to supervise
    finally:
        stop.set()
        thread.join(timeout=5)
    _create(alice)  # queued
    assert supervision.has_pending_work()
    ticks.clear()
    stop = threading.Event()
    thread = supervision.start_supervisor(stop, interval=0.02, idle_interval=30)
    try:
        assert wait_until(lambda: len(ticks) >= 5, timeout=5)
    finally:
        stop.set()
        thread.join(timeout=5)
