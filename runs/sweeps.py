"""Temporary folders the service makes go when their run ends or, once older than
SKILLRUNNER_TEMP_MAX_AGE_SECONDS, at an hourly sweep (a django-q2 schedule that `migrate` makes,
as retention's).

What is temporary, and who removes it:

- a run's upload staging (`<run dir>/.uploads-staging`, `admission.attach_upload`): removed when
  the run ends (`remove_run_leftovers`, on the commit of its last transition) and by the sweep
  for runs that ended within the last day (a process that died between the two);
- a temporary skill's snapshot (`skill-snapshots/.temporary/…`, R-UP4): removed when its run
  ends, and by the sweep when no unfinished run uses it (one whose version row never committed,
  once old enough);
- a request's staging folders (file replies in `reply-staging/`, skill packages in `tmp/`):
  removed by the request itself, whatever its outcome; a process killed in the middle leaves
  them, and the sweep removes them once old enough — a request in flight is younger;
- a sandbox's state directory (engines.sandbox) once no live turn holds its lock.

The run directory, records and engine homes of a finished run are retention's (`retention.py`).
"""

from __future__ import annotations

import logging
import shutil
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from engines.sandbox import remove_orphaned_state
from skills.models import SkillVersion
from skills.services import staging_root, temporary_snapshot_root

from .models import TERMINAL_STATUSES, Run, RunStatus

logger = logging.getLogger(__name__)

UPLOAD_STAGING = ".uploads-staging"
REPLY_STAGING = "reply-staging"
# Runs that ended this long ago or less are looked at for leftovers: the sweep runs every hour,
# so each ended run is looked at many times, and the table is never read whole.
ENDED_LOOKBACK = timedelta(days=1)


def reply_staging_root() -> Path:
    """Where file replies are staged while their request is read (upstream.reply_files)."""
    return settings.DATA_DIR / REPLY_STAGING


def remove_run_leftovers(run_dir: Path) -> None:
    """What a run that ended needs no more of its temporary folders."""
    shutil.rmtree(run_dir / UPLOAD_STAGING, ignore_errors=True)  # rmtree removes a link, never its target


def sweep() -> int:
    """Remove what is temporary and no longer anyone's; returns how many folders went."""
    too_old = time.time() - settings.SKILLRUNNER_TEMP_MAX_AGE_SECONDS
    removed = sum(_remove_older(root, too_old) for root in (reply_staging_root(), staging_root()))
    ended = Run.objects.filter(status__in=TERMINAL_STATUSES, finished_at__gte=timezone.now() - ENDED_LOOKBACK)
    for run in ended.only("request_id").iterator(chunk_size=2000):
        staging = run.run_dir / UPLOAD_STAGING
        if staging.exists():
            remove_run_leftovers(run.run_dir)
            removed += 1
    removed += _remove_unused_temporary_snapshots(too_old)
    removed += remove_orphaned_state()
    if removed:
        logger.info("removed %d temporary folders left behind", removed)
    return removed


def _remove_older(root: Path, too_old: float) -> int:
    removed = 0
    for entry in _entries(root):
        if _modified(entry) < too_old:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def _remove_unused_temporary_snapshots(too_old: float) -> int:
    """A temporary skill's snapshot outlives its run only if the process that ended the run died
    before removing it; one without a version row was being made (its transaction may still be
    open) or rolled back, and goes once old enough."""
    folders = {str(entry): entry for entry in _entries(temporary_snapshot_root())}
    if not folders:
        return 0
    versions = SkillVersion.objects.filter(snapshot_dir__in=list(folders), skill__temporary=True)
    in_use = set(versions.filter(runs__status__in=_unfinished()).values_list("snapshot_dir", flat=True).distinct())
    known = set(versions.values_list("snapshot_dir", flat=True))
    removed = 0
    for name, entry in folders.items():
        if name in in_use or (name not in known and _modified(entry) >= too_old):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += 1
    return removed


def _unfinished() -> list[str]:
    return [status for status in RunStatus.values if status not in TERMINAL_STATUSES]


def _entries(root: Path) -> list[Path]:
    try:
        return list(root.iterdir())
    except FileNotFoundError:
        return []


def _modified(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except FileNotFoundError:
        return float("inf")  # gone meanwhile: nothing to remove
