"""A turn's usage is written in one statement (issue #43), as Model.save wrote it: each reported
count in its column, null where nothing was reported, its own time; and it is counted for the
scrape (runs.hooks.turn_recorded) in the same transaction, or not at all."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from tests.support.jobs import create_job

pytestmark = pytest.mark.django_db


def _turns_counted(engine: str) -> tuple[int, int]:
    from metrics.models import TurnDurations

    rows = TurnDurations.objects.filter(engine=engine)
    return sum(row.turns for row in rows), sum(row.duration_ms for row in rows)


def test_a_turns_usage_is_one_insert_with_what_was_reported_and_is_counted(api, install_skill, manual_dispatch):
    from runs.models import Run, TurnUsage
    from runs.usage import record_turn_usage

    install_skill("haiku-writer")
    run = Run.objects.get(pk=create_job(api)["request_id"])
    with CaptureQueriesContext(connection) as captured:
        record_turn_usage(run, 1, {"input_tokens": 120, "output_tokens": 30, "cost_usd": 0.25}, 900)
    inserts = [query["sql"] for query in captured.captured_queries if query["sql"].startswith("INSERT")]
    assert len(inserts) == 2 and '"runs_turnusage"' in inserts[0]  # the usage, then its count (kernel.counters)
    record_turn_usage(run, 2, None, None)
    stored = list(TurnUsage.objects.filter(run=run).order_by("attempt_number"))
    assert [
        (turn.attempt_number, turn.input_tokens, turn.cached_input_tokens, turn.output_tokens, turn.cost_usd)
        for turn in stored
    ] == [(1, 120, None, 30, 0.25), (2, None, None, None, None)]
    assert [turn.duration_ms for turn in stored] == [900, None]
    assert run.created_at <= stored[0].created_at <= stored[1].created_at
    assert _turns_counted(run.engine) == (1, 900)  # a turn without a measured duration is not counted


def test_a_turn_rolled_back_is_neither_stored_nor_counted(api, install_skill, manual_dispatch):
    from runs.models import Run, TurnUsage
    from runs.usage import record_turn_usage

    install_skill("haiku-writer")
    run = Run.objects.get(pk=create_job(api)["request_id"])
    with pytest.raises(RuntimeError), transaction.atomic():
        record_turn_usage(run, 1, {"input_tokens": 5}, 1200)
        raise RuntimeError("the turn's completion failed after its usage")
    assert not TurnUsage.objects.filter(run=run).exists()
    assert _turns_counted(run.engine) == (0, 0)
