"""What other apps add to a run's life without `runs` importing them: signals sent as a run is
created and changes, and jobs for the supervisor's tick. An app connects its receivers and
registers its jobs in its AppConfig.ready() (`notifications` does both: webhooks and emails).

Receivers are called with `Signal.send`, so an exception raised by one propagates to the change
that sent it: a refused callback URL refuses the run, and a receiver's failure inside a
transaction rolls the change back with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.dispatch import Signal

# lifecycle.transition, inside the transaction that changes the status and appends its events
# (run=): whatever a receiver writes commits with them or not at all.
status_changed = Signal()

# services.record_relay_activity, inside the transaction that adds a run's relay tokens and
# writes its refusals' `security` events (run=, tokens=, reasons= each refusal's reason): sent
# only when there is either.
relay_recorded = Signal()

# usage.record_turn_usage, inside the transaction that completes a turn, once its usage is
# saved (run=, duration_ms= as measured by the worker, or None).
turn_recorded = Signal()

# Admission, before anything is written (url=): a receiver refuses a callback URL by raising a
# coded ApplicationError.
checking_callback = Signal()

# Admission, inside the transaction that creates a run with a callback URL, after the run's first
# status (run=, url=): a receiver returns the secret that signs what the callback receives, shown
# once in the API's answer.
callback_requested = Signal()


@dataclass(frozen=True)
class SupervisorJob:
    tick: Callable[[], object]  # once a supervisor tick, after the runs' own steps
    # Whether the job may find something due soon while no run is unfinished (an idle
    # supervisor ticks slowly); None: it only ever finds work around unfinished runs.
    pending: Callable[[], bool] | None = None


supervisor_jobs: list[SupervisorJob] = []


def register_supervisor_job(job: SupervisorJob) -> None:
    if job not in supervisor_jobs:  # ready() may run more than once (Django's warning)
        supervisor_jobs.append(job)
