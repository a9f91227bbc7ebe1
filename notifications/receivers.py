"""How notifications plug into a run's life (runs.hooks), connected once by the app's ready()."""

from __future__ import annotations

from typing import Any

from runs import hooks
from runs.models import Run

from . import destinations, services
from .email import offer_due_question_emails


def record_status_change(sender: type[Run], *, run: Run, **kwargs: Any) -> None:
    services.record_status_change(run)


def check_callback(sender: type[Run], *, url: str, **kwargs: Any) -> None:
    destinations.check(url)  # R-NT2: refused with its stable code before the run is written


def register_callback(sender: type[Run], *, run: Run, url: str, **kwargs: Any) -> str:
    return services.register_callback(run, url).secret


def connect() -> None:
    hooks.status_changed.connect(record_status_change, sender=Run)
    hooks.checking_callback.connect(check_callback, sender=Run)
    hooks.callback_requested.connect(register_callback, sender=Run)
    hooks.register_supervisor_job(hooks.SupervisorJob(services.offer_due_deliveries, services.deliveries_pending))
    hooks.register_supervisor_job(hooks.SupervisorJob(offer_due_question_emails))
