"""Run retention (SKILLRUNNER_RUN_RETENTION_DAYS): a finished run's folders go once it is old enough.

An hourly django-q2 schedule calls ``remove_expired_runs``. It takes runs that finished (succeeded,
failed or canceled) more than the configured days ago and removes their run directory, records
(logs, bundle) and engine homes; the run row stays, marked ``files_removed_at``, so its status,
result and history remain, while its files answer 410 ``RUN_FILES_REMOVED``. With
SKILLRUNNER_RUN_RETENTION_DELETE_ROWS the rows go as well (events and interactions cascade).
Active runs are never touched: only terminal runs are selected, and each row is claimed by a
conditional update before anything is removed, so two workers never remove the same run twice.
"""

from __future__ import annotations

import logging
import shutil
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from enginehost.config import engine_home

from .models import TERMINAL_STATUSES, Run

logger = logging.getLogger(__name__)

BATCH = 500


def remove_expired_runs() -> int:
    """Remove what retention allows, in batches; returns the number of runs whose files went."""
    days = settings.SKILLRUNNER_RUN_RETENTION_DAYS
    if not days:
        return 0
    cutoff = timezone.now() - timedelta(days=days)
    removed = 0
    while True:
        batch = list(
            Run.objects.filter(status__in=TERMINAL_STATUSES, finished_at__lt=cutoff, files_removed_at__isnull=True)
            .order_by("finished_at")
            .only("request_id", "engine")[:BATCH]
        )
        for run in batch:
            if _claim(run.pk):
                _remove_folders(run)
                removed += 1
        if settings.SKILLRUNNER_RUN_RETENTION_DELETE_ROWS:
            # Events, interactions and usage rows cascade; in batches, so no delete grows unbounded.
            Run.objects.filter(pk__in=[run.pk for run in batch], files_removed_at__isnull=False).delete()
        if len(batch) < BATCH:
            break
    if removed:
        logger.info("retention removed the folders of %d runs finished before %s", removed, cutoff.isoformat())
    return removed


def _claim(request_id) -> bool:
    """Mark the run's files removed, once: a concurrent remover or a changed run gets False."""
    return (
        Run.objects.filter(pk=request_id, status__in=TERMINAL_STATUSES, files_removed_at__isnull=True).update(
            files_removed_at=timezone.now()
        )
        == 1
    )


def _remove_folders(run: Run) -> None:
    for folder in (run.run_dir, run.records_dir, engine_home(run.engine, str(run.pk))):
        # rmtree removes a link the agent left, never what it points to.
        shutil.rmtree(folder, ignore_errors=True)
