"""GET /v1/jobs/{id}/events ends only once it has sent the run's last event (R-OP8), however the
run's end falls between the stream's reads."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from live import watcher as live
from runs.models import Run, RunEvent
from runs.services import cancel_run
from tests.support.clients import read_event_stream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def test_a_run_ending_between_the_streams_reads_is_streamed_to_its_last_event(api, trip_run):
    request_id = trip_run()
    assert Run.objects.get(pk=request_id).status == "waiting_user"
    last_seq = RunEvent.objects.filter(run_id=request_id).latest("seq").seq
    response = api.get(f"/v1/jobs/{request_id}/events", {"after_seq": last_seq})
    canceled = False

    def cancel_after_the_first_read(execute, sql, params, many, context):
        """The run ends right after the stream's first read of the run's status, before it reads
        the events."""
        nonlocal canceled
        result = execute(sql, params, many, context)
        if not canceled and sql.startswith('SELECT "runs_run"."status"'):
            canceled = True
            cancel_run(Run.objects.get(pk=request_id))
        return result

    # The stream's reads run on the live watcher's thread (live.watcher.ProcessWatcher.read).
    def watch_reads(install: bool) -> None:
        wrappers = connection.execute_wrappers
        wrappers.append(cancel_after_the_first_read) if install else wrappers.remove(cancel_after_the_first_read)

    live._WATCHER_THREAD.submit(watch_reads, True).result(10)
    try:
        text = read_event_stream(response)
    finally:
        live._WATCHER_THREAD.submit(watch_reads, False).result(10)

    assert canceled
    ids = [int(i) for i in re.findall(r"^id: (\d+)$", text, re.MULTILINE)]
    events = RunEvent.objects.filter(run_id=request_id, seq__gt=last_seq).order_by("seq")
    assert ids == [event.seq for event in events]
    assert events.last().payload["to"] == "canceled"
    assert text.endswith("event: end\ndata: {}\n\n")
