"""Recording what a run's provider relay counted and refused (R-SB8, R-SB9)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from engines.relay import RelayRefusal
from kernel.compiled import one_or_none
from kernel.counters import add_to_row

from .. import hooks
from ..events import append_events
from ..models import Run, TokenSpend
from .lifecycle import locked


def record_relay_activity(
    request_id, attempt_number: int, tokens: int, refusals: list[RelayRefusal]
) -> tuple[int, int] | None:
    """Add `tokens` to the run and to its owner's day, and each refusal as a `security` event;
    returns what the run and its owner have spent today, as recorded (None: the run is gone)."""
    day = timezone.localdate()
    with transaction.atomic():
        run = (
            locked(request_id)
            if refusals
            else one_or_none(Run.objects.filter(pk=request_id).only("owner_id", "engine"))
        )
        if run is None:
            return None
        if tokens:
            Run.objects.filter(pk=request_id).update(model_tokens=F("model_tokens") + tokens)
            add_to_row(TokenSpend, {"owner_id": run.owner_id, "day": day}, tokens=tokens)
        if refusals:
            append_events(run, [("security", security_event(attempt_number, refusal)) for refusal in refusals])
        if tokens or refusals:
            reasons = [refusal.reason for refusal in refusals]
            hooks.relay_recorded.send(sender=Run, run=run, tokens=tokens, reasons=reasons)  # the metrics' counters
        run_spent = Run.objects.filter(pk=request_id).values_list("model_tokens", flat=True).get()
        day_spent = one_or_none(
            TokenSpend.objects.filter(owner_id=run.owner_id, day=day).values_list("tokens", flat=True)
        )
    return run_spent, day_spent or 0


def security_event(attempt_number: int, refusal: RelayRefusal) -> dict:
    return {
        "attempt": attempt_number,
        "source": "relay",
        "reason": refusal.reason,
        "method": refusal.method,
        "path": refusal.path,
        "message": refusal.detail,
    }
