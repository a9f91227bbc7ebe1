"""A finished turn taken to the run's next state: the one entry the worker calls when an engine
turn is over (`end_turn`).

In order: the outcome decided against the completion gates (runs.outcome), a success's files
gathered into artifacts/ (runs.artifacts), a repair round considered (runs.repair), the provider
keys the turn left in its artifacts redacted and every place one was found recorded (R-SB10,
runs.output_keys), and the decision recorded (runs.services.complete_turn). What only the worker
has stays there: its claim control, the logs it saved, the answer it scrubbed of keys, whether
its engine session can take another message. Every write goes through runs.services, under the
worker's retry policy (runs.supervision.retry_while_database_away).
"""

from __future__ import annotations

import dataclasses

from enginehost.config import configured_secrets
from engines.types import FAILURE_ABORTED, TurnResult

from . import services
from .artifacts import collect_artifacts
from .models import InteractiveProfile, Run, RunStatus
from .outcome import TurnDecision, decide, list_artifacts
from .output_keys import RESULT, redact_artifacts
from .repair import RepairBudget, review
from .supervision import retry_while_database_away


def end_turn(
    run: Run,
    worker: str,
    turn: TurnResult,
    *,
    duration_ms: int,
    can_continue: bool,
    logs_with_keys: list[str],
    answer_redacted: bool,
    unrecorded_pid: int | None = None,
) -> Run | None:
    """Decide `turn` (already scrubbed of configured keys) and record it; returns the run as
    recorded, or None when the claim ended meanwhile (a cancel: services recorded why).

    `can_continue`: the engine session can take another message (a session id, a resident
    process that lives), which a repair round needs. `logs_with_keys`: the saved logs that held a
    configured key; `answer_redacted`: the turn's answer held one and was scrubbed;
    `unrecorded_pid`: the engine's pid the database was away for (services.complete_turn)."""
    found = [*logs_with_keys, RESULT] if answer_redacted else list(logs_with_keys)
    if turn.failure_reason == FAILURE_ABORTED:
        _record_keys_found(run, found)
        return None
    output_schema = run.version.schemas["output"]
    decision = decide(
        mode=run.options.execution_mode,
        turn=turn,
        output_schema=output_schema,
        artifact_specs=run.version.artifacts,
        run_dir=run.run_dir,
        attempt_number=run.attempt_number,
        max_attempt=run.version.max_attempt,
        needs_session_handle=run.interactive_profile == InteractiveProfile.RESUMABLE,
        repair_rounds=run.repair_rounds,
    )
    if decision.status == RunStatus.SUCCEEDED:
        # outcome only read the run directory; the files are gathered here, before a repair
        # review, so that a file gone meanwhile is an ARTIFACT_MISSING like any other.
        decision = _collected(decision, run)
    budget = RepairBudget(round=run.repair_round, max_rounds=run.options.max_repair_rounds, can_continue=can_continue)
    decision = review(
        decision, budget, output_schema=output_schema, run_dir=run.run_dir, mode=run.options.execution_mode
    )
    _record_keys_found(run, found)  # after collection moved the answer's files into artifacts/
    return retry_while_database_away(
        services.complete_turn, run.pk, run.attempt_number, worker, turn, decision, duration_ms, unrecorded_pid
    )


def _collected(decision: TurnDecision, run: Run) -> TurnDecision:
    """A succeeded decision with its declared files gathered into artifacts/ and the answer's
    paths rewritten to them (R-OU1); a file gone since the decision makes it ARTIFACT_MISSING."""
    collection = collect_artifacts(decision.data or {}, run.version.artifacts, run.run_dir)
    warnings = decision.warnings + collection.warnings
    artifacts = list_artifacts(run.run_dir)
    if collection.error:
        return dataclasses.replace(
            decision,
            status=RunStatus.FAILED,
            error=collection.error,
            problems=collection.problems,
            warnings=warnings,
            artifacts=artifacts,
        )
    return dataclasses.replace(decision, data=collection.data, warnings=warnings, artifacts=artifacts)


def _record_keys_found(run: Run, found: list[str]) -> None:
    """R-SB10 at the turn's end: the files the agent left in artifacts/ redacted in place, and
    every place a configured key was found (`found` so far, and those files) recorded once."""
    found = found + redact_artifacts(run.run_dir, configured_secrets())
    if found:
        retry_while_database_away(services.record_keys_in_output, run.pk, run.attempt_number, found)
