"""What a scrape of GET /metrics costs beside 10,000 runs, the service busy (R-OP11: under 50 ms).

    .venv/bin/python -m bench.metrics [--database-url postgres://…] [--runs 10000] [--repeat 100]
                                      [--writers 2] [--json F] [--explain]

In this process, on a throwaway database (a throwaway PostgreSQL database with --database-url):
`--runs` runs of 200 users made in bulk with what a service that ran them keeps — most finished
(succeeded, failed under a few error codes, canceled), some queued, running and waiting for a
person with their question; two turns' usage each, a dozen events each (a few of them the relay's
refusals), a webhook delivery for every finished run, question emails, live connections. Then
`--repeat` scrapes through Django's test client with a staff token (middleware, authentication,
every query, the text format; no socket), while `--writers` processes write what busy workers
write (the relay's tokens and refusals of the running runs, failures of queued ones, each a write
every 10 ms: the rows the counted figures are kept in): median and p90 of the wall time and of
this process's CPU time (and the mean CPU time of its PostgreSQL backend, on this machine), and
statements. `--explain` prints the plan of each statement a scrape runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from importlib import import_module
from pathlib import Path
from typing import Any

TARGET_MS = 50.0
USERS = 200
TURNS_PER_RUN = 2
EVENTS_PER_RUN = 12
BATCH = 2_000
# How the runs are spread, as a service running for a while holds them.
STATUSES = {"succeeded": 0.70, "failed": 0.15, "canceled": 0.05, "queued": 0.05, "waiting_user": 0.04, "running": 0.01}
ERROR_CODES = ("ENGINE_FAILED", "OUTPUT_INVALID", "TIMEOUT", "ORCHESTRATOR_RESTART_INTERRUPTED", "BUDGET_EXCEEDED")
ENGINES = ("codex", "claude", "gemini", "opencode")
# A writer's pace: two of them write a few hundred times a second, more than a hundred busy turns
# would (each records its relay's tokens at a heartbeat, seconds apart), and leave a core free.
WRITE_INTERVAL = 0.01


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.metrics", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument(
        "--writers", type=int, default=2, help="processes writing what busy workers write while the scrapes run"
    )
    parser.add_argument("--write", action="store_true", help=argparse.SUPPRESS)  # one of those processes
    args = parser.parse_args(argv)
    if args.write:
        return _write_until_stopped()

    from .inprocess import explain, throwaway_service

    with throwaway_service("metrics", args.database_url) as database_url:
        client = _seed(args.runs)
        figures: dict[str, Any] = {"config": "PostgreSQL" if database_url else "SQLite", "runs": args.runs}
        with _writers(args.writers) as writes:
            figures.update(_measure(client, args.repeat))
        figures.update(writers=args.writers, writes=sum(writes))
        if args.explain:
            explain(lambda: client.get("/metrics"))
    print(line(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


def _seed(count: int):
    """The runs and what they left, in bulk; a client with a staff token."""
    from django.apps import apps
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.test import Client
    from django.utils import timezone

    from accounts.models import ApiToken, LiveConnection
    from notifications.models import QuestionEmail, WebhookDelivery, WebhookEndpoint
    from runs.models import Interaction, Run, RunEvent, TurnUsage
    from runs.services.dispatching import owner_queue_changed
    from skills.selectors import current_version

    User = get_user_model()
    version = current_version("haiku-writer")
    assert version is not None
    owners = [User.objects.create(username=f"metrics-user-{n}", email=f"u{n}@example.org") for n in range(USERS)]
    pick = random.Random(count)
    now = timezone.now()
    statuses = pick.choices(list(STATUSES), weights=list(STATUSES.values()), k=count)
    runs = [
        Run(
            request_id=uuid.uuid4(),
            owner=owners[n % USERS],
            skill=version.skill,
            skill_version=version,
            engine=ENGINES[n % len(ENGINES)],
            execution_mode="interactive" if status == "waiting_user" else "auto",
            interactive_profile="resumable",
            status=status,
            error={"code": pick.choice(ERROR_CODES), "message": "bench"} if status == "failed" else None,
            holds_slot=status == "running",
            pending_interaction_id=1 if status == "waiting_user" else None,
            model_tokens=pick.randrange(0, 50_000),
            last_event_seq=EVENTS_PER_RUN,
        )
        for n, status in enumerate(statuses)
    ]
    endpoint_of = {}
    with transaction.atomic():
        Run.objects.bulk_create(runs, batch_size=BATCH)
        for owner in owners:
            owner_queue_changed(owner.pk)
            endpoint_of[owner.pk] = WebhookEndpoint.objects.create(owner=owner, url="https://example.org/hook")
        TurnUsage.objects.bulk_create(
            (
                TurnUsage(run=run, attempt_number=turn, duration_ms=pick.randrange(500, 900_000), output_tokens=100)
                for run in runs
                if run.status != "queued"
                for turn in range(1, TURNS_PER_RUN + 1)
            ),
            batch_size=BATCH,
        )
        RunEvent.objects.bulk_create(
            (
                RunEvent(run=run, seq=seq, kind=_event_kind(pick, seq), payload=_payload(pick, seq))
                for run in runs
                for seq in range(1, EVENTS_PER_RUN + 1)
            ),
            batch_size=BATCH,
        )
        questions = Interaction.objects.bulk_create(
            (
                Interaction(run=run, interaction_id=1, attempt_number=1, prompt="Which city next?", payload={})
                for run in runs
                if run.status == "waiting_user"
            ),
            batch_size=BATCH,
        )
        QuestionEmail.objects.bulk_create(
            (
                QuestionEmail(interaction=question, state="sent", next_attempt_at=now, sent_at=now)
                for question in questions
                if pick.random() < 0.5
            ),
            batch_size=BATCH,
        )
        WebhookDelivery.objects.bulk_create(
            (
                WebhookDelivery(
                    endpoint=endpoint_of[run.owner_id],
                    run=run,
                    event=f"run.{run.status}",
                    payload={},
                    state=pick.choices(("delivered", "failed", "pending"), weights=(95, 3, 2))[0],
                    next_attempt_at=now,
                )
                for run in runs
                if run.status in ("succeeded", "failed", "canceled")
            ),
            batch_size=BATCH,
        )
        LiveConnection.objects.bulk_create(
            LiveConnection(user=owners[n], expires_at=now + timedelta(seconds=90)) for n in range(USERS // 2)
        )
        # Rows made in bulk pass no receiver: counted as the migrations count what was stored before.
        import_module("metrics.migrations.0001_initial").count_past_turns(apps, None)
        import_module("metrics.migrations.0002_run_ends_and_relay_counters").count_past_runs(apps, None)
        import_module("notifications.migrations.0006_outbox_ends").count_past_ends(apps, None)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # what autovacuum would have done by now
    staff = User.objects.create(username="prometheus", is_staff=True)
    _, key = ApiToken.issue(staff)
    return Client(HTTP_AUTHORIZATION=f"Token {key}", HTTP_HOST="127.0.0.1")


def _event_kind(pick: random.Random, seq: int) -> str:
    if seq == 1:
        return "status"
    return "security" if pick.random() < 0.01 else pick.choice(("activity", "activity", "assistant_message", "status"))


def _payload(pick: random.Random, seq: int) -> dict[str, Any]:
    if seq == 1:
        return {"status": "queued"}
    return {"source": "relay", "reason": pick.choice(("key_in_request", "path", "method")), "text": "x" * 40}


@contextmanager
def _writers(count: int) -> Iterator[list[int]]:
    """`count` processes on the same database (this one's settings, from the environment), each
    recording the relay's tokens and refusals of running runs and failing queued ones, one write
    each WRITE_INTERVAL seconds, until the block ends; then the list holds how many writes each
    made."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.metrics", "--write"], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
        )
        for _ in range(count)
    ]
    writes: list[int] = []
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline() == "ready\n", "a writer did not start"
        yield writes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            output, _ = process.communicate(timeout=30)
            assert process.returncode == 0, f"a writer failed ({process.returncode}): its output is above"
            writes.append(int(output))


def _write_until_stopped() -> int:
    import django

    django.setup()
    from django.db import OperationalError

    from engines.relay import RelayRefusal
    from runs.models import Run, RunStatus
    from runs.services import fail_run, record_relay_activity

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, frame: stopping.append(number))
    running = list(Run.objects.filter(status=RunStatus.RUNNING).values_list("pk", flat=True))
    queued = list(Run.objects.filter(status=RunStatus.QUEUED).values_list("pk", flat=True))
    pick = random.Random(os.getpid())
    refusal = RelayRefusal("key_in_request", "POST", "/v1/responses", "bench")
    print("ready", flush=True)
    writes = 0
    while not stopping:
        try:
            if queued and pick.random() < 0.1:
                fail_run(queued.pop(pick.randrange(len(queued))), pick.choice(ERROR_CODES), "bench")
            else:
                refused = [refusal] if pick.random() < 0.05 else []
                record_relay_activity(pick.choice(running), 1, pick.randrange(1, 2_000), refused)
            writes += 1
            time.sleep(WRITE_INTERVAL)
        except OperationalError:  # SQLite's busy timeout, under this much writing
            continue
    print(writes, flush=True)
    return 0


def _measure(client, repeat: int) -> dict[str, Any]:
    """Wall time and statements (backlog.timed), and the CPU time of this thread: on a shared
    machine the wall time also counts the waits for a core, the CPU time does not (SQLite's work is
    in it; PostgreSQL's, in its server's process, is not)."""
    from .backlog import WARMUP, timed

    cpu_ms = []

    def scrape(_: Any) -> None:
        began = time.thread_time()
        response = client.get("/metrics")
        cpu_ms.append((time.thread_time() - began) * 1000)
        assert response.status_code == 200, response.content

    server_began = _server_cpu_ms()
    figures: dict[str, Any] = timed(scrape, repeat)
    server_ended = _server_cpu_ms()
    measured = cpu_ms[WARMUP : WARMUP + repeat]  # the samples timed() kept
    figures.update(cpu_median_ms=statistics.median(measured), cpu_p90_ms=statistics.quantiles(measured, n=10)[-1])
    if server_began is not None and server_ended is not None:
        figures["server_cpu_mean_ms"] = (server_ended - server_began) / len(cpu_ms)
    return figures


def _server_cpu_ms() -> float | None:
    """The CPU time so far of this process's PostgreSQL backend, when the server runs on this
    machine (its /proc entry readable; in clock ticks, so only a mean over many scrapes tells)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    user, system = int(fields[11]), int(fields[12])  # utime and stime, the 14th and 15th fields
    return (user + system) * 1000 / os.sysconf("SC_CLK_TCK")


def line(figures: dict[str, Any]) -> str:
    verdict = "within" if figures["p90_ms"] < TARGET_MS else "OVER"
    return (
        f"GET /metrics beside {figures['runs']:,} runs ({figures['config']}): {figures['median_ms']:.1f} ms median, "
        f"{figures['p90_ms']:.1f} ms p90 (CPU {figures['cpu_median_ms']:.1f} ms median, {figures['cpu_p90_ms']:.1f} ms p90"
        + (f"; the server's {server:.1f} ms mean" if (server := figures.get("server_cpu_mean_ms")) is not None else "")
        + "), "
        f"{figures['statements']} statements, {figures['writers']} writers beside ({figures['writes']:,} writes) "
        f"({verdict} R-OP11's {TARGET_MS:.0f} ms at p90)"
    )


if __name__ == "__main__":
    sys.exit(main())
