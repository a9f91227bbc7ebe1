"""Fill the database with work in progress, to measure what a run costs beside a backlog (R-SC1).

    python manage.py seed_backlog --queued 10000 --users 200 --waiting 1000

Queued runs are owned round-robin by `backlog-user-<n>` users, each owner's place in the dispatch
order set through the service as if the runs had been created one by one; the runs waiting for a
person are interactive, each with its open question. All are made in bulk on the first installed
skill, with no folders: they are load, not work, and no worker should be running meanwhile.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from runs.models import Interaction, InteractiveProfile, Run, RunStatus
from runs.services.dispatching import owner_queue_changed
from skills.models import SkillVersion

BATCH = 1_000
PROMPT = "Which city next?"
QUESTION = {"interaction_id": 1, "kind": "open_text", "prompt": PROMPT}


def bulk_runs(owners: Sequence[Any], count: int, version: SkillVersion, **fields: Any) -> list[Run]:
    """`count` runs of `owners` in turn (queued unless `fields` say otherwise), made in one go
    rather than through the services; each owner's place in the dispatch order is then set by
    the service."""
    fields = {"engine": "codex", "execution_mode": "auto", "interactive_profile": InteractiveProfile.RESUMABLE} | fields
    runs = [
        Run(
            request_id=uuid.uuid4(), owner=owners[n % len(owners)], skill=version.skill, skill_version=version, **fields
        )
        for n in range(count)
    ]
    with transaction.atomic():
        Run.objects.bulk_create(runs, batch_size=BATCH)
        for owner in owners:
            owner_queue_changed(owner.pk)
    return runs


def waiting_runs(owners: Sequence[Any], count: int, version: SkillVersion) -> None:
    """`count` interactive runs of `owners` waiting for a reply to their first question."""
    runs = bulk_runs(
        owners,
        count,
        version,
        execution_mode="interactive",
        status=RunStatus.WAITING_USER,
        attempt_number=1,
        interaction_count=1,
        pending_interaction_id=1,
    )
    Interaction.objects.bulk_create(
        (Interaction(run=run, interaction_id=1, attempt_number=1, prompt=PROMPT, payload=QUESTION) for run in runs),
        batch_size=BATCH,
    )


class Command(BaseCommand):
    help = "Create queued runs and runs waiting for a person in bulk (benchmarks of cost at scale)."

    def add_arguments(self, parser):
        parser.add_argument("--queued", type=int, default=10_000)
        parser.add_argument("--waiting", type=int, default=1_000)
        parser.add_argument("--users", type=int, default=200)

    def handle(self, *args, queued: int, waiting: int, users: int, **options):
        if queued < 0 or waiting < 0 or users <= 0:
            raise CommandError("--queued and --waiting must not be negative, --users must be positive")
        version = SkillVersion.objects.select_related("skill").order_by("pk").first()
        if version is None:
            raise CommandError("no skill is installed (manage.py load_skills)")
        owners = [get_user_model().objects.get_or_create(username=f"backlog-user-{n}")[0] for n in range(1, users + 1)]
        if queued:
            bulk_runs(owners, queued, version)
        if waiting:
            waiting_runs(owners, waiting, version)
        if options["verbosity"]:
            self.stdout.write(f"{queued} runs queued and {waiting} waiting for a person, of {users} users")
