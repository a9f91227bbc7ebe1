"""Run retention (SKILLRUNNER_RUN_RETENTION_DAYS): old finished runs lose their folders on an
hourly schedule; active and recent runs keep everything; removed files answer 410."""

from __future__ import annotations

import importlib
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import Schedule

from runs import retention
from runs.models import Run, RunEvent
from tests.support.jobs import create_job, haiku_step

pytestmark = pytest.mark.django_db(transaction=True)  # runs are dispatched on commit


@pytest.fixture
def finished_run(api, install_skill, fake_codex, settings):
    """`finished_run(days_ago)`: a succeeded haiku run, its artifact, logs, bundle and engine home
    on disk, finished that many days ago."""
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())

    def make(days_ago: float) -> Run:
        # A topic of its own: an identical earlier run would be a cache hit, with no turn.
        request_id = create_job(api, input={"topic": f"{days_ago} days ago"})["request_id"]
        assert api.get(f"/v1/jobs/{request_id}/bundle").status_code == 200  # built on first request
        Run.objects.filter(pk=request_id).update(finished_at=timezone.now() - timedelta(days=days_ago))
        run = Run.objects.get(pk=request_id)
        assert run.status == "succeeded"
        return run

    return make


def _folders(run: Run, data_dir: Path) -> list[Path]:
    return [run.run_dir, run.records_dir, data_dir / "engine-homes" / run.engine / str(run.pk)]


def test_old_finished_runs_lose_their_folders_and_answer_410(api, finished_run, settings, alice):
    settings.SKILLRUNNER_RUN_RETENTION_DAYS = 30
    old, recent = finished_run(31), finished_run(29)
    active = Run.objects.create(
        owner=alice,
        skill=old.skill,
        skill_version=old.skill_version,
        engine="codex",
        execution_mode="interactive",
        interactive_profile=old.interactive_profile,
        status="waiting_user",
        finished_at=timezone.now() - timedelta(days=90),  # never set on an active run; ignored anyway
    )
    active.run_dir.mkdir(parents=True)
    assert all(folder.is_dir() for folder in _folders(old, settings.DATA_DIR))

    assert retention.remove_expired_runs() == 1
    assert not any(folder.exists() for folder in _folders(old, settings.DATA_DIR))
    assert all(folder.is_dir() for folder in _folders(recent, settings.DATA_DIR))
    assert active.run_dir.is_dir()
    assert Run.objects.get(pk=active.pk).files_removed_at is None

    # The row stays: status, result and history still answer; the files say they are gone.
    assert api.get(f"/v1/jobs/{old.pk}").json()["status"] == "succeeded"
    assert api.get(f"/v1/jobs/{old.pk}/result").json()["result"]["data"]["haiku"]
    assert api.get(f"/v1/jobs/{old.pk}/events/history?after_seq=0").status_code == 200
    for path in ("artifacts", "artifacts/artifacts/haiku.md", "bundle", "logs", "logs?stream=stdout"):
        response = api.get(f"/v1/jobs/{old.pk}/{path}")
        assert response.status_code == 410, (path, response.content)
        assert response.json()["detail"]["code"] == "RUN_FILES_REMOVED"
    assert api.get(f"/v1/jobs/{recent.pk}/artifacts").json()["artifacts"] == ["artifacts/haiku.md"]
    assert retention.remove_expired_runs() == 0  # nothing is removed twice


def test_delete_rows_removes_the_runs_with_their_events(finished_run, settings):
    settings.SKILLRUNNER_RUN_RETENTION_DAYS = 7
    settings.SKILLRUNNER_RUN_RETENTION_DELETE_ROWS = True
    old, recent = finished_run(8), finished_run(1)
    assert RunEvent.objects.filter(run=old).exists()
    assert retention.remove_expired_runs() == 1
    assert not Run.objects.filter(pk=old.pk).exists()
    assert not RunEvent.objects.filter(run_id=old.pk).exists()
    assert not old.run_dir.exists()
    assert Run.objects.filter(pk=recent.pk).exists() and recent.run_dir.is_dir()


def test_retention_off_removes_nothing(finished_run, settings):
    settings.SKILLRUNNER_RUN_RETENTION_DAYS = 0
    old = finished_run(3650)
    assert retention.remove_expired_runs() == 0
    assert old.run_dir.is_dir()


def test_the_migration_makes_each_hourly_schedule_once():
    """Not at worker start: workers starting together each made one (django-q2's names are not
    unique). Rows an earlier start made, duplicates included, give way to one of each."""
    schedules = importlib.import_module("runs.migrations.0020_hourly_schedules")
    Schedule.objects.create(name="skillrunner-run-retention", func="runs.retention.remove_expired_runs")
    Schedule.objects.create(name="skillrunner-run-retention", func="runs.retention.remove_expired_runs")
    schedules.create_schedules(django_apps, None)
    schedules.create_schedules(django_apps, None)
    made = sorted(Schedule.objects.values_list("name", "func", "schedule_type", "repeats"))
    assert made == [
        ("skillrunner-run-retention", "runs.retention.remove_expired_runs", Schedule.HOURLY, -1),
        ("skillrunner-temporary-folders", "runs.sweeps.sweep", Schedule.HOURLY, -1),
    ]
    for _, func, _, _ in made:
        assert callable(import_string(func))
