"""A state change's events are written in one statement (issue #43), as bulk_create wrote them:
numbered in order, each payload stored as its JSON field stores it, each stamped in turn."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.jobs import create_job

pytestmark = pytest.mark.django_db


def test_a_changes_events_are_one_insert_each_with_its_payload_and_time(api, install_skill, manual_dispatch):
    from runs.events import append_events
    from runs.models import Run, RunEvent

    install_skill("haiku-writer")
    run = Run.objects.get(pk=create_job(api)["request_id"])
    before = run.last_event_seq
    payloads = [{"text": "ünïcode ✓", "when": datetime(2026, 1, 2).isoformat()}, {"nested": {"list": [1, None, True]}}]
    with CaptureQueriesContext(connection) as captured:
        append_events(run, [("activity", payloads[0]), ("activity", payloads[1])])
    inserts = [query["sql"] for query in captured.captured_queries if query["sql"].startswith("INSERT")]
    assert len(inserts) == 1
    stored = list(RunEvent.objects.filter(run=run, seq__gt=before).order_by("seq"))
    assert [(event.seq, event.kind, event.payload) for event in stored] == [
        (before + 1, "activity", payloads[0]),
        (before + 2, "activity", payloads[1]),
    ]
    assert run.created_at <= stored[0].created_at <= stored[1].created_at  # stamped one after the other
    assert Run.objects.get(pk=run.pk).last_event_seq == before + 2
