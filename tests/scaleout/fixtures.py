"""The `deployments` fixture: start scale-out deployments on demand, always stopped afterwards."""

from __future__ import annotations

import json

import pytest

from tests.scaleout.deployment import Deployment

HAIKU = {"topic": "sea", "haiku": ["waves fold", "into the grey", "morning"], "haiku_file": "artifacts/haiku.md"}
HAIKU_DONE = {"files": {"artifacts/haiku.md": "waves fold\ninto the grey\nmorning\n"}, "message": json.dumps(HAIKU)}
QUESTION = "Where would you like to go?"
PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["fjord walk"]}], "plan_file": "artifacts/plan.md"}
PLAN_DONE = {"files": {"artifacts/plan.md": "# Oslo\n"}, "message": json.dumps({**PLAN, "__SKILL_DONE__": True})}


def standard_scripts(deployment: Deployment) -> Deployment:
    """haiku-writer answers at once; trip-planner asks one question, then finishes."""
    deployment.engine.script("haiku-writer", HAIKU_DONE)
    deployment.engine.script("trip-planner", {"message": QUESTION}, PLAN_DONE)
    return deployment


@pytest.fixture
def deployments(tmp_path):
    started: list[Deployment] = []

    def make(**kwargs) -> Deployment:
        deployment = standard_scripts(Deployment(tmp_path / f"deployment-{len(started)}", **kwargs))
        started.append(deployment)
        return deployment

    yield make
    for deployment in started:
        deployment.stop()
