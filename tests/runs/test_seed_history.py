"""`manage.py seed_history`: the history the scale benchmark (bench/history.py) measures."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

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


def test_refuses_a_database_that_already_holds_runs(install_skill):
    install_skill("haiku-writer")
    call_command("seed_history", runs=2, events_per_run=2, verbosity=0)
    with pytest.raises(CommandError, match="already holds runs"):
        call_command("seed_history", runs=2, events_per_run=2, verbosity=0)
