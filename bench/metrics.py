"""What a scrape of GET /metrics costs beside 10,000 runs (R-OP11: under 50 ms).

    .venv/bin/python -m bench.metrics [--database-url postgres://…] [--runs 10000] [--repeat 100]
                                      [--json F] [--explain]

In this process, on a throwaway database (a throwaway PostgreSQL database with --database-url):
`--runs` runs of 200 users made in bulk with what a service that ran them keeps — most finished
(succeeded, failed under a few error codes, canceled), some queued, running and waiting for a
person with their question; two turns' usage each, a dozen events each (a few of them the relay's
refusals), a webhook delivery for every finished run, question emails, live connections. Then
`--repeat` scrapes through Django's test client with a staff token (middleware, authentication,
every query, the text format; no socket): median, p90 and statements. `--explain` prints the plan
of each statement a scrape runs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.metrics", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args(argv)

    from .inprocess import explain, throwaway_service

    with throwaway_service("metrics", args.database_url) as database_url:
        client = _seed(args.runs)
        figures: dict[str, Any] = {"config": "PostgreSQL" if database_url else "SQLite", "runs": args.runs}
        figures.update(_measure(client, args.repeat))
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
        # Turns made in bulk send no post_save: counted into the histogram as the migration counts past ones.
        import_module("metrics.migrations.0001_initial").count_past_turns(apps, None)
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


def _measure(client, repeat: int) -> dict[str, Any]:
    from .backlog import timed

    def scrape(_: Any) -> None:
        response = client.get("/metrics")
        assert response.status_code == 200, response.content

    return timed(scrape, repeat)


def line(figures: dict[str, Any]) -> str:
    verdict = "within" if figures["median_ms"] < TARGET_MS else "OVER"
    return (
        f"GET /metrics beside {figures['runs']:,} runs ({figures['config']}): {figures['median_ms']:.1f} ms median, "
        f"{figures['p90_ms']:.1f} ms p90, {figures['statements']} statements ({verdict} R-OP11's {TARGET_MS:.0f} ms)"
    )


if __name__ == "__main__":
    sys.exit(main())
