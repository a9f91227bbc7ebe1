"""A backlog of runs made in bulk, for the tests and benchmarks of dispatch at scale (R-SC1)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any


def bulk_runs(owners: Sequence[Any], count: int, skill_id: str = "haiku-writer", **fields: Any) -> None:
    """`count` runs of `owners` in turn (queued unless `fields` say otherwise), made in one go
    rather than through the services, so thousands take a moment; each owner's place in the
    dispatch order is then set by the service, as creating them one by one would have."""
    from django.db import transaction

    from runs.models import Run
    from runs.services.dispatching import owner_queue_changed
    from skills.selectors import current_version

    version = current_version(skill_id)
    assert version is not None, f"{skill_id} is not installed"

    def run(owner) -> Run:
        return Run(
            request_id=uuid.uuid4(),
            owner=owner,
            skill=version.skill,
            skill_version=version,
            engine="codex",
            execution_mode="auto",
            interactive_profile="resumable",
            **fields,
        )

    with transaction.atomic():
        Run.objects.bulk_create((run(owners[n % len(owners)]) for n in range(count)), batch_size=1000)
        for owner in owners:
            owner_queue_changed(owner.pk)
