"""A backlog of runs made in bulk, for the tests and benchmarks of dispatch at scale (R-SC1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def bulk_runs(owners: Sequence[Any], count: int, skill_id: str = "haiku-writer", **fields: Any) -> None:
    """`count` runs of `owners` in turn, on `skill_id` (seed_backlog's bulk_runs)."""
    from runs.management.commands.seed_backlog import bulk_runs as seed
    from skills.selectors import current_version

    version = current_version(skill_id)
    assert version is not None, f"{skill_id} is not installed"
    seed(owners, count, version, **fields)
