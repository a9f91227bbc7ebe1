"""Fill the database with a long history, to measure list, page and admin times at scale (#16).

    python manage.py seed_history --runs 100000 --events-per-run 50 --users 20

Runs are finished (succeeded, failed or canceled), spread over the past year, owned round-robin by
`seed-user-<n>` users, on the first installed skill; each gets a realistic event sequence (status
changes, activity, a question and its answer). No folders are made: it is history, not work.
Refused unless the database is empty of runs, so it never mixes with real data.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from runs.models import InteractiveProfile, Run, RunEvent, RunStatus
from skills.models import SkillVersion

BATCH = 2_000
ACTIVITY = {"type": "tool", "phase": "finished", "command": "ls artifacts", "output": "plan.md\n", "exit_code": 0}


class Command(BaseCommand):
    help = "Create finished runs and their events in bulk (benchmarks of history at scale)."

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, default=100_000)
        parser.add_argument("--events-per-run", type=int, default=50)
        parser.add_argument("--users", type=int, default=20)
        parser.add_argument("--seed", type=int, default=1)

    def handle(self, *args, runs: int, events_per_run: int, users: int, seed: int, **options):
        if runs <= 0 or users <= 0 or events_per_run < 2:
            raise CommandError("--runs and --users must be positive, --events-per-run at least 2")
        if Run.objects.exists():
            raise CommandError("the database already holds runs: seed_history only fills an empty one")
        version = SkillVersion.objects.select_related("skill").order_by("pk").first()
        if version is None:
            raise CommandError("no skill is installed (manage.py load_skills)")
        owners = [get_user_model().objects.get_or_create(username=f"seed-user-{n}")[0] for n in range(1, users + 1)]
        rng = random.Random(seed)
        now = timezone.now()
        for start in range(0, runs, BATCH):
            count = min(BATCH, runs - start)
            batch = [self._run(rng, now, owners[(start + i) % users], version, events_per_run) for i in range(count)]
            created = [run.created_at for run in batch]
            with transaction.atomic():
                Run.objects.bulk_create(batch)  # auto_now_add stamps now on each: the past is put back
                for run, when in zip(batch, created, strict=True):
                    run.created_at = when
                Run.objects.bulk_update(batch, ["created_at"])
                self._add_events(batch, events_per_run)
            self.stdout.write(f"{start + count} runs, {(start + count) * events_per_run} events")

    @staticmethod
    def _run(rng: random.Random, now, owner, version: SkillVersion, events: int) -> Run:
        created = now - timedelta(seconds=rng.randrange(365 * 24 * 3600))
        status = rng.choices([RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELED], [8, 1, 1])[0]
        run = Run(
            request_id=uuid.uuid4(),
            owner=owner,
            skill=version.skill,
            skill_version=version,
            engine=rng.choice(["codex", "gemini", "claude"]),
            execution_mode="interactive",
            interactive_profile=InteractiveProfile.RESUMABLE,
            input={"topic": f"seed {rng.randrange(10**9)}"},
            status=status,
            attempt_number=2,
            interaction_count=1,
            last_event_seq=events,
            started_at=created + timedelta(seconds=1),
            finished_at=created + timedelta(seconds=rng.randrange(30, 600)),
            result={"status": status, "data": {"answer": "seeded"}, "artifacts": []},
        )
        run.created_at = created
        return run

    def _add_events(self, batch: list[Run], count: int) -> None:
        if connection.vendor != "postgresql":
            RunEvent.objects.bulk_create(
                (event for run in batch for event in self._events(run, count)), batch_size=BATCH
            )
            return
        # Millions of rows: made by the server in one statement, not built as Python objects.
        table = RunEvent._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {table} (run_id, seq, kind, payload, created_at)
                SELECT run.id, seq,
                       CASE WHEN seq = 1 THEN 'status' WHEN seq = %(count)s THEN 'result' ELSE 'activity' END,
                       CASE WHEN seq = 1 OR seq = %(count)s THEN jsonb_build_object('status', run.status)
                            ELSE %(activity)s::jsonb END,
                       now()
                FROM unnest(%(runs)s::uuid[], %(statuses)s::text[]) AS run(id, status),
                     generate_series(1, %(count)s) AS seq
                """,
                {
                    "count": count,
                    "runs": [run.pk for run in batch],
                    "statuses": [run.status for run in batch],
                    "activity": json.dumps(ACTIVITY),
                },
            )

    @staticmethod
    def _events(run: Run, count: int):
        kinds = ["status"] + ["activity"] * (count - 2) + ["result"]
        for seq, kind in enumerate(kinds, start=1):
            payload = ACTIVITY if kind == "activity" else {"status": run.status}
            yield RunEvent(run=run, seq=seq, kind=kind, payload=payload)
