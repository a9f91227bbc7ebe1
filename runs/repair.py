"""Output repair (R-RP1, R-RP2): a final answer that fails the output schema or lacks a required
artifact goes back to the same engine session with the problems listed, for a few rounds.

Pure: ``review`` turns the decision of a finished turn into a repair round, or marks how the
repair ended; runs.turn_end asks it, runs.services applies it and worker.execution sends the
prompt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.prompt import repair_prompt
from engines.types import ExecutionMode

from .outcome import TurnDecision

REPAIRING = "repairing"  # a decision status: the run goes on with a repair round

# What a repair round may fix. In interactive runs these arise only with the done marker
# (R-LC2 step 2); a question is never failed, so never repaired.
REPAIRABLE_CODES = frozenset({"OUTPUT_SCHEMA_INVALID", "ARTIFACT_MISSING"})
# Once repairing, an answer with no JSON at all is one more failed attempt at the result.
REPAIRABLE_IN_ROUND = REPAIRABLE_CODES | {"OUTPUT_MISSING"}

WARNING_CONVERGED = "OUTPUT_SCHEMA_REPAIR_CONVERGED"
WARNING_EXHAUSTED = "OUTPUT_SCHEMA_REPAIR_EXHAUSTED"
REPAIR_LEVEL = "reprompt"


@dataclass(frozen=True)
class RepairBudget:
    round: int  # the repair round the finished turn was; 0 when it was not one
    max_rounds: int  # runtime_options.max_repair_rounds (0: repair is off)
    can_continue: bool  # the engine session can take another message (a session id, a resident process)


def _rounds(count: int) -> str:
    return f"{count} repair round{'s' if count != 1 else ''}"


def review(
    decision: TurnDecision,
    budget: RepairBudget,
    *,
    output_schema: dict[str, Any],
    run_dir: Path,
    mode: ExecutionMode,
) -> TurnDecision:
    """The decision once repair is considered: a new round, a converged or an exhausted repair."""
    if decision.status == "succeeded" and budget.round:
        warning = {"code": WARNING_CONVERGED, "message": f"the answer was fixed in repair round {budget.round}"}
        return dataclasses.replace(decision, repair_level=REPAIR_LEVEL, warnings=[*decision.warnings, warning])
    code = (decision.error or {}).get("code")
    if decision.status != "failed" or code not in (REPAIRABLE_IN_ROUND if budget.round else REPAIRABLE_CODES):
        return decision
    if budget.round < budget.max_rounds and budget.can_continue:
        next_round = budget.round + 1
        prompt = repair_prompt(
            problems=decision.problems,
            output_schema=output_schema,
            run_dir=run_dir,
            mode=mode,
            round_number=next_round,
            max_rounds=budget.max_rounds,
        )
        return dataclasses.replace(decision, status=REPAIRING, repair_prompt=prompt)
    if not budget.round:
        return decision  # repair off, or no session to continue: it fails as before
    warning = {
        "code": WARNING_EXHAUSTED,
        "message": f"the answer was still invalid after {_rounds(budget.round)}",
    }
    return dataclasses.replace(decision, warnings=[*decision.warnings, warning])
