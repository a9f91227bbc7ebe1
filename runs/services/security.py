"""Recording a provider key found in what a run produced (R-SB10); the relay's refusals are
recorded with its spend (services.spend)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from ..events import append_events
from ..models import EventKind, Run
from .lifecycle import locked

OUTPUT_SOURCE = "output"
KEY_IN_OUTPUT = "PROVIDER_KEY_IN_OUTPUT"


def record_keys_in_output(request_id, attempt_number: int, paths: Iterable[str]) -> None:
    """A `security` event for each place (a run-relative file, a log, or "result") where a
    configured provider key was found in the attempt's output and redacted. Each place once per
    attempt: serving a file again, or finding it again, adds nothing. The key itself is never
    written down."""
    places = list(dict.fromkeys(paths))
    if not places:
        return
    with transaction.atomic():
        try:
            run = locked(request_id)
        except Run.DoesNotExist:
            return
        recorded = set(
            run.events.filter(
                kind=EventKind.SECURITY, payload__source=OUTPUT_SOURCE, payload__attempt=attempt_number
            ).values_list("payload__path", flat=True)
        )
        fresh = [path for path in places if path not in recorded]
        if fresh:
            append_events(run, [(EventKind.SECURITY, _finding(attempt_number, path)) for path in fresh])


def _finding(attempt_number: int, path: str) -> dict:
    return {
        "attempt": attempt_number,
        "source": OUTPUT_SOURCE,
        "reason": KEY_IN_OUTPUT,
        "path": path,
        "message": f"a configured provider key was found in {path} and redacted",
    }
