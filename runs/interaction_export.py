"""An auditor's export of runs' interaction history (issue 41): every question of the chosen runs
with its answer, who answered, how it was resolved and when, as CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from django.db.models import QuerySet

from .models import Interaction, Run

COLUMNS = (
    "run",
    "skill",
    "engine",
    "asked_by",
    "interaction_id",
    "kind",
    "question",
    "answer",
    "resolution",
    "answered_by",
    "asked_at",
    "answered_at",
)
# A spreadsheet runs a cell starting with one of these as a formula: the CSV quotes it as text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def interaction_records(runs: QuerySet[Run]) -> list[dict[str, Any]]:
    """The runs' questions in the order they were asked, run by run; one query however many."""
    interactions = (
        Interaction.objects.filter(run__in=runs)
        .select_related("run__skill", "run__owner", "answered_by")
        .order_by("run__created_at", "run_id", "interaction_id")
    )
    return [
        {
            "run": str(interaction.run_id),
            "skill": interaction.run.skill.skill_id if interaction.run.skill else None,
            "engine": interaction.run.engine,
            # The agent asks on behalf of the run's owner, who started it.
            "asked_by": interaction.run.owner.get_username(),
            "interaction_id": interaction.interaction_id,
            "kind": interaction.kind,
            "question": interaction.prompt,
            "answer": interaction.response,
            "resolution": interaction.resolution_mode or None,
            "answered_by": interaction.answered_by.get_username() if interaction.answered_by else None,
            "asked_at": interaction.asked_at.isoformat(),
            "answered_at": interaction.answered_at.isoformat() if interaction.answered_at else None,
        }
        for interaction in interactions
    ]


def _cell(value: Any) -> str:
    text = "" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def as_csv(records: list[dict[str, Any]]) -> str:
    """One row per question; structured answers as JSON text."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    writer.writerows([_cell(record[column]) for column in COLUMNS] for record in records)
    return out.getvalue()


def as_json(records: list[dict[str, Any]]) -> str:
    """The records as a JSON document; answers keep their JSON shape."""
    return json.dumps({"interactions": records}, indent=2, ensure_ascii=False)
