"""`manage.py seed_history`: the history the scale benchmark (bench/history.py) measures."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Sum
from django.test import Client
from django.test.utils import CaptureQueriesContext

from runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db


def test_seeds_finished_runs_with_their_events_spread_over_a_year(install_skill):
    install_skill("haiku-writer")
    call_command("seed_history", runs=45, events_per_run=6, users=4, verbosity=0)
    runs = Run.objects.all()
    assert runs.count() == 45 and RunEvent.objects.count() == 45 * 6
    assert {run.is_terminal for run in runs} == {True}
    assert runs.values("owner").distinct().count() == 4
    ages = sorted(run.created_at for run in runs)
    assert (ages[-1] - ages[0]).days > 30  # spread out, not all stamped now
    run = runs.first()
    assert list(run.events.values_list("seq", flat=True)) == [1, 2, 3, 4, 5, 6]
    assert list(run.events.values_list("kind", flat=True)) == ["status", *["activity"] * 4, "result"]
    assert run.last_event_seq == 6
    statuses = {r.status for r in runs}
    assert statuses == {"succeeded", "failed", "canceled"}
    for seeded in runs:  # each run's events carry its own status
        assert seeded.events.get(seq=1).payload == {"status": seeded.status}


def test_refuses_a_database_that_already_holds_runs(install_skill):
    install_skill("haiku-writer")
    call_command("seed_history", runs=2, events_per_run=2, verbosity=0)
    with pytest.raises(CommandError, match="already holds runs"):
        call_command("seed_history", runs=2, events_per_run=2, verbosity=0)


@pytest.fixture
def admin_pages(admin_user, install_skill):
    """A staff browser over a seeded history, and the SQL each page it opens runs."""
    install_skill("haiku-writer")
    call_command("seed_history", runs=30, events_per_run=12, users=3, verbosity=0)
    browser = Client()
    browser.force_login(admin_user)

    def open_page(path: str) -> tuple[str, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            response = browser.get(path)
        assert response.status_code == 200, path
        return response.content.decode(), [query["sql"] for query in queries.captured_queries]

    return open_page


def test_admin_lists_never_scan_the_whole_history_for_filters_or_counts(admin_pages):
    """#16: the filters of the runs, interactions and events lists take their choices from the code
    (engines, event kinds), not from a DISTINCT over every row, and the events list counts at
    most 10,000 rows; these scans cost seconds at millions of events."""
    for path in ("/admin/runs/run/", "/admin/runs/interaction/", "/admin/runs/runevent/"):
        page, queries = admin_pages(path)
        assert not [sql for sql in queries if "DISTINCT" in sql and "runs_run" in sql.split("FROM")[1]], path
        assert not [sql for sql in queries if "DATE_TRUNC" in sql.upper() or "django_date_trunc" in sql], path
    page, queries = admin_pages("/admin/runs/runevent/")
    assert not [sql for sql in queries if "DISTINCT" in sql]
    counts = [sql for sql in queries if "COUNT(" in sql.upper() and "runs_runevent" in sql]
    assert counts and all("LIMIT 10000" in sql for sql in counts), counts
    assert "?kind__exact=activity_truncated" in page and "_facets" not in page
    runs_page, _ = admin_pages("/admin/runs/run/")
    assert "?engine=codex" in runs_page and "?engine=claude" in runs_page


def test_admin_run_page_inlines_its_conversation_events_and_links_the_activity(admin_pages):
    """R-UI4 inline events, without the thousands of activity events a long turn makes."""
    run = Run.objects.first()
    page, _ = admin_pages(f"/admin/runs/run/{run.pk}/change/")
    assert f"/admin/runs/runevent/?run__exact={run.pk}" in page and "12 events" in page
    assert page.count('class="field-seq"') == 2  # the status and result events, not the 10 activities
    events, _ = admin_pages(f"/admin/runs/runevent/?run__exact={run.pk}")
    assert events.count(f">{run.pk}<") == 12


def test_seed_backlog_queues_runs_in_their_owners_places_and_parks_runs_on_a_question(
    install_skill, admin_user, settings
):
    """`manage.py seed_backlog` (bench/backlog.py): queued runs as dispatch sees them, and waiting
    runs whose question the API serves."""
    from rest_framework.test import APIClient

    from runs.services.dispatching import dispatch_state, next_turns, ready_places

    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 3
    install_skill("haiku-writer")
    call_command("seed_backlog", queued=30, waiting=6, users=3, verbosity=0)
    queue_length = ready_places().aggregate(length=Sum("ready_count"))["length"]
    assert Run.objects.filter(status="queued").count() == queue_length == 30
    owners = {
        turn.request_id: Run.objects.get(pk=turn.request_id).owner.username for turn in next_turns(dispatch_state())
    }
    assert sorted(owners.values()) == ["backlog-user-1", "backlog-user-2", "backlog-user-3"]  # one each, in turn
    waiting = Run.objects.filter(status="waiting_user")
    assert waiting.count() == 6 and waiting.values("owner").distinct().count() == 3
    api = APIClient()
    api.force_authenticate(admin_user)
    pending = api.get(f"/v1/jobs/{waiting.first().pk}/interaction/pending").json()
    assert pending["pending"]["prompt"] == "Which city next?"


def test_seed_backlog_refuses_nonsense():
    with pytest.raises(CommandError, match="must be positive"):
        call_command("seed_backlog", queued=1, waiting=0, users=0, verbosity=0)
