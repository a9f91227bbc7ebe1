"""Temporary folders (runs.sweeps): what a run stages goes when it ends, and what a killed process
left behind (a reply's or a package's staging, a run's upload staging, a temporary skill's
snapshot) goes at the hourly sweep once older than SKILLRUNNER_TEMP_MAX_AGE_SECONDS. After 1,000
runs with replies, uploads and cancels, the data dir holds what the runs themselves need and the
staging of requests still in flight: nothing else."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import BUNDLED_SKILLS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

RUNS = 1000
TEMPORARY_SKILL_RUNS = 10
HOUR = 3600


def _aged(path: Path, seconds: float) -> Path:
    """`path` as a process that died `seconds` ago left it."""
    past = time.time() - seconds
    os.utime(path, (past, past))
    return path


def _leftover_folder(root: Path, *, age: float) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=root))
    (folder / "part").write_bytes(b"half a file")
    return _aged(folder, age)


def _upload_staging(run) -> Path:
    from runs.sweeps import UPLOAD_STAGING

    staging = run.run_dir / UPLOAD_STAGING
    staging.mkdir(parents=True)
    (staging / "input.csv").write_text("a,b\n")
    return staging


def _everything_under(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def test_a_thousand_runs_with_replies_uploads_and_cancels_leave_nothing_behind(
    alice, install_skill, isolated_data_dir, settings
):
    from runs import services
    from runs.models import Run, RunStatus
    from runs.sweeps import reply_staging_root, sweep
    from skills.packages import load_skill_dir
    from skills.services import staging_root, temporary_snapshot_root, temporary_version

    settings.SKILLRUNNER_TEMP_MAX_AGE_SECONDS = HOUR
    version = install_skill("trip-planner")
    kinds = ["waiting", "upload_canceled", "running_canceled", "upload_expired"]
    base = {"owner": alice, "engine": "codex", "input": {}, "skill": version.skill, "skill_version": version}
    fields = {
        "waiting": {
            "status": RunStatus.WAITING_USER,
            "execution_mode": "interactive",
            "interactive_profile": "resumable",
        },
        "upload_canceled": {"status": RunStatus.QUEUED, "awaiting_upload": True},
        "running_canceled": {"status": RunStatus.RUNNING},
        "upload_expired": {"status": RunStatus.QUEUED, "awaiting_upload": True},
    }
    auto = {"execution_mode": "auto", "interactive_profile": "resumable"}
    runs = Run.objects.bulk_create(
        [Run(**base, **{**auto, **fields[kinds[i % 4]]}) for i in range(RUNS)], batch_size=500
    )
    needed: set[str] = set()
    for run in runs:  # what a run needs: its files (an artifact here)
        (run.run_dir / "artifacts").mkdir(parents=True)
        (run.run_dir / "artifacts" / "plan.md").write_text("# plan\n")
        needed |= {f"runs/{run.pk}", f"runs/{run.pk}/artifacts", f"runs/{run.pk}/artifacts/plan.md"}

    # Leftovers of processes killed in the middle: a web reading a reply's files (one per waiting
    # run), an upload (one per run waiting for it), a skill package being installed.
    for run in runs:
        if run.status == RunStatus.WAITING_USER:
            _leftover_folder(reply_staging_root(), age=2 * HOUR)
        else:
            if run.awaiting_upload:
                _upload_staging(run)
    _leftover_folder(staging_root(), age=2 * HOUR)
    # Requests in flight right now: theirs to remove, not the sweep's.
    in_flight = [_leftover_folder(reply_staging_root(), age=60), _leftover_folder(staging_root(), age=60)]
    for folder in in_flight:
        needed |= {str(path.relative_to(isolated_data_dir)) for path in (folder.parent, folder, folder / "part")}

    # Runs whose skill came with their upload (R-UP4), and a snapshot whose run was never committed.
    package = load_skill_dir(BUNDLED_SKILLS / "trip-planner")
    temporary_runs = []
    for _ in range(TEMPORARY_SKILL_RUNS):
        own = temporary_version(package, user=alice)
        temporary_runs.append(
            Run.objects.create(**{**base, "skill": own.skill, "skill_version": own}, **auto, status=RunStatus.RUNNING)
        )
    never_committed = temporary_snapshot_root() / "never-committed"
    (never_committed / "trip-planner").mkdir(parents=True)
    _aged(never_committed, 2 * HOUR)

    # The runs end through the services: canceled by their owner, or out of time for their upload.
    for run in [*runs, *temporary_runs]:
        if run.status == RunStatus.RUNNING or (run.awaiting_upload and runs.index(run) % 4 == 1):
            assert services.cancel_run(run)[1]
        elif run.awaiting_upload:
            assert services.expire_upload(run.pk)
    assert not list(isolated_data_dir.glob("runs/*/.uploads-staging"))  # gone as each run ended
    # A process that died between a run's end and its cleanup leaves its staging behind.
    _upload_staging(runs[2])
    # A temporary skill whose run ended, as if the removal at the end never ran.
    (temporary_runs[0].version.path / "trip-planner").mkdir(parents=True, exist_ok=True)

    assert sweep() > 0
    installed = {  # the installed skill's snapshot, which its runs need
        str(path.relative_to(isolated_data_dir))
        for path in (isolated_data_dir / "skill-snapshots").rglob("*")
        if not path.is_relative_to(temporary_snapshot_root())
    }
    needed |= installed | {"runs", "skill-snapshots", "skill-snapshots/.temporary"}
    left = _everything_under(isolated_data_dir)
    assert left - needed == set(), sorted(left - needed)[:20]
    assert Run.objects.filter(status=RunStatus.WAITING_USER).count() == RUNS // 4  # live runs untouched
    assert all(folder.exists() for folder in in_flight)
    assert sweep() == 0  # nothing more to find
