"""Keeping runs honest when processes die (R-LC9, R-LC13): recovery at worker start, and a
once-a-second tick that fires wait and upload deadlines, reaps dead claims, re-dispatches queued
runs and runs the jobs other apps registered (hooks.supervisor_jobs: due webhooks and emails)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, connections
from django.utils import timezone

from engines.process import kill_process_groups, pid_alive

from . import hooks, services
from .models import InteractiveProfile, RecoveryState, Run, RunStatus, WorkerCluster

logger = logging.getLogger(__name__)

# How long a finished turn keeps trying to record its outcome while the database is away
# (retry_while_database_away); the reaper of this host gives a live worker's claim that long
# beyond the usual staleness.
OUTCOME_RETRY_SECONDS = 60.0


def retry_while_database_away(operation, *args, pause: float = 0.5):
    """The worker's one retry policy for the database: every service call it makes outside an
    engine's turn (claiming, waiting, recording a turn's end, starting up) goes through here, so
    a short outage delays it instead of failing or losing the run. During a turn the claim checks
    (worker.execution.ClaimControl) never wait: they let the engine run on until the claim would
    go stale."""
    attempts = round(OUTCOME_RETRY_SECONDS / pause)
    for attempt in range(attempts):
        try:
            return operation(*args)
        except (OperationalError, InterfaceError):
            if attempt == attempts - 1:
                raise
            if attempt == 0:
                logger.warning("the database did not answer; trying again for %.0fs", OUTCOME_RETRY_SECONDS)
            connection.close()
            time.sleep(pause)


def stale_claim_seconds() -> float:
    """How long without a heartbeat before a claim counts as dead (peers reap it then)."""
    return settings.SKILLRUNNER_HEARTBEAT_SECONDS * 3 + 5


INTERRUPTED = "ORCHESTRATOR_RESTART_INTERRUPTED"
# A worker renews its presence this often; one silent for WORKER_STALE_SECONDS no longer counts
# (on another machine that is the only sign of its death; on this one its pid tells at once).
WORKER_HEARTBEAT_SECONDS = 2.0
WORKER_STALE_SECONDS = 10.0


def _parse_claim(claimed_by: str) -> tuple[str, int | None, str]:
    host, _, rest = claimed_by.partition(":")
    pid_text, _, token = rest.partition(":")
    return host, int(pid_text) if pid_text.isdigit() else None, token


def _claim_is_dead(run: Run, stale_before) -> bool:
    """A claim whose worker process is gone, or that stopped renewing its heartbeat (a worker
    cut off from the database, or on a machine that vanished). A worker of this host that is
    alive may be recording its outcome right after a database outage (which stopped its
    heartbeats too): it gets the outcome's retry time on top before its claim counts as dead."""
    host, pid, _ = _parse_claim(run.claimed_by)
    if host == socket.gethostname():
        if not pid_alive(pid):
            return True
        stale_before -= timedelta(seconds=OUTCOME_RETRY_SECONDS)
    return run.heartbeat_at is None or run.heartbeat_at < stale_before


def _fail_dead_claims(runs: list[Run]) -> None:
    """The runs fail first, then their engines are killed, all in one grace period: a turn that
    still lives then finds its claim gone instead of recording its engine's death as its outcome."""
    for run in runs:
        _fail_dead_claim(run)
    host = socket.gethostname()
    engines = [run.engine_pid for run in runs if run.engine_pid and _parse_claim(run.claimed_by)[0] == host]
    kill_process_groups(engines, grace=settings.SKILLRUNNER_KILL_GRACE_SECONDS)


def _fail_dead_claim(run: Run) -> None:
    if run.status == RunStatus.WAITING_USER:
        services.fail_run(
            run.pk,
            "INTERACTION_PROCESS_LOST",
            "the resident engine process was lost while waiting",
            recovery_state=RecoveryState.FAILED_RECONCILED,
        )
    else:
        services.fail_run(
            run.pk,
            INTERRUPTED,
            "the worker running this turn stopped before it finished",
            recovery_state=RecoveryState.FAILED_RECONCILED,
        )


def reap_dead_claims() -> int:
    """Running turns (and sticky waits) whose worker is gone fail with their stable code."""
    stale_before = timezone.now() - timedelta(seconds=stale_claim_seconds())
    claimed = Run.objects.filter(status__in=[RunStatus.RUNNING, RunStatus.WAITING_USER]).exclude(claimed_by="")
    dead = [
        run
        for run in claimed.only("request_id", "status", "claimed_by", "heartbeat_at", "engine_pid")
        if _claim_is_dead(run, stale_before)
    ]
    _fail_dead_claims(dead)
    return len(dead)


def expire_waits() -> int:
    due = Run.objects.filter(status=RunStatus.WAITING_USER, wait_deadline_at__lte=timezone.now()).values_list(
        "request_id", flat=True
    )
    return sum(1 for request_id in list(due) if services.expire_wait(request_id))


def expire_uploads() -> int:
    """R-FS1: a run whose upload never came fails with UPLOAD_TIMEOUT, so it holds no queue room."""
    due = timezone.now() - timedelta(seconds=settings.SKILLRUNNER_UPLOAD_TIMEOUT_SECONDS)
    stale = Run.objects.filter(status=RunStatus.QUEUED, awaiting_upload=True, created_at__lte=due)
    return sum(
        1 for request_id in list(stale.values_list("request_id", flat=True)) if services.expire_upload(request_id)
    )


def recover_on_worker_start() -> None:
    """R-LC13, run before the cluster takes work."""
    reap_dead_claims()
    waiting = Run.objects.filter(status=RunStatus.WAITING_USER, interactive_profile=InteractiveProfile.RESUMABLE)
    for run in waiting.only("request_id", "session_handle", "pending_interaction_id"):
        if run.session_handle and run.pending_interaction_id:
            services.recover_waiting_run(run.pk)
        else:
            services.fail_run(
                run.pk,
                "SESSION_RESUME_FAILED",
                "the waiting run has no session to resume after a restart",
                recovery_state=RecoveryState.FAILED_RECONCILED,
            )
    services.dispatch_queued_runs()


def record_worker_recovered(token: str) -> None:
    """After recover_on_worker_start and the cluster's start: this worker now counts for /readyz.
    Rows that dead workers left behind go at the same time."""
    now = timezone.now()
    host = socket.gethostname()
    for cluster in WorkerCluster.objects.exclude(token=token):
        if not _worker_is_alive(cluster, now - timedelta(hours=1)):
            cluster.delete()
    WorkerCluster.objects.update_or_create(
        token=token, defaults={"host": host, "pid": os.getpid(), "recovered_at": now, "heartbeat_at": now}
    )


def renew_worker_heartbeat(token: str, *, draining: bool = False) -> bool:
    """False when this worker has no row (not recorded yet, or removed as dead by a peer)."""
    updated = WorkerCluster.objects.filter(token=token).update(heartbeat_at=timezone.now(), draining=draining)
    return updated == 1


def forget_worker(token: str) -> None:
    WorkerCluster.objects.filter(token=token).delete()


# /readyz's answer while every live worker is stopping (R-OP10): alive, but taking no more turns.
DRAINING = "draining"


def _live_workers() -> list[WorkerCluster]:
    """Workers that finished their start-up recovery and live now; what a dead one left behind
    never counts (R-OP7)."""
    stale_before = timezone.now() - timedelta(seconds=WORKER_STALE_SECONDS)
    return [cluster for cluster in WorkerCluster.objects.all() if _worker_is_alive(cluster, stale_before)]


def worker_check() -> str:
    """/readyz's check (registered in RunsConfig.ready)."""
    live = _live_workers()
    if any(not cluster.draining for cluster in live):
        return "ok"
    return DRAINING if live else "no live worker has finished its start-up recovery"


def _worker_is_alive(cluster: WorkerCluster, stale_before) -> bool:
    if cluster.heartbeat_at < stale_before:
        return False
    return cluster.host != socket.gethostname() or pid_alive(cluster.pid)


def release_own_claims(token: str) -> None:
    """On shutdown, end this cluster's turns so their engine processes are killed promptly."""
    mine = Run.objects.filter(status__in=[RunStatus.RUNNING, RunStatus.WAITING_USER], claimed_by__endswith=f":{token}")
    _fail_dead_claims(list(mine.only("request_id", "status", "claimed_by", "engine_pid")))


def supervise_once() -> None:
    expire_waits()
    expire_uploads()
    reap_dead_claims()
    services.dispatch_queued_runs()
    for job in hooks.supervisor_jobs:
        job.tick()


def has_pending_work() -> bool:
    """Whether a tick may find something due soon: a run not ended yet, or what a registered job
    says is pending (a webhook to send)."""
    unfinished = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_USER)
    return Run.objects.filter(status__in=unfinished).exists() or any(
        job.pending() for job in hooks.supervisor_jobs if job.pending is not None
    )


def start_supervisor(stop: threading.Event, interval: float = 1.0, idle_interval: float = 5.0) -> threading.Thread:
    """Ticks every `interval` while there is work that can come due, every `idle_interval` when
    there is none: an idle service costs two queries every few seconds, not six a second (#16).
    New work is dispatched on commit by whoever made it; the tick is the safety net. A tick
    with nothing pending has nothing to supervise: every step of supervise_once looks at
    unfinished runs, or at what its job says is pending."""

    def loop() -> None:
        wait = interval
        try:
            while not stop.wait(wait):
                wait = interval
                try:
                    if has_pending_work():
                        supervise_once()
                    else:
                        wait = idle_interval
                except Exception:
                    logger.exception("supervisor tick failed")
                finally:
                    close_old_connections()
        finally:
            connections.close_all()  # kept between ticks (the worker's setting), not beyond the thread

    thread = threading.Thread(target=loop, name="run-supervisor", daemon=True)
    thread.start()
    return thread
