"""What one run costs in SQL statements (R-CR1): creating a run at most 8, claiming a turn at most
5 on SQLite and 6 on PostgreSQL, ending a turn that asks at most 8, each counted on its common
path after a first run warmed the process's caches. A statement added to any fails its test,
which prints the statements.

What each count covers:
- **creating a run**: `POST /v1/jobs` with an API key for an installed auto skill (its result
  cache looked up), from the request's arrival to its commit (authentication, admission, the run
  inserted with its first event, its owner's place), and the dispatch its commit starts with a
  slot free, offering the new run. The task queue's own insert is not counted (the embedded
  broker adds one statement; Redis none).
- **claiming a turn**: `runs.services.claim_turn` for the run next in turn while another owner
  holds a slot (so fair share reads the slot holders too): the fair-share check, the run taking
  its slot, its owner's place and its status event; on a database with row locks (PostgreSQL)
  the dispatch lock first, which SQLite needs not: its transactions begin IMMEDIATE.
- **ending an asking turn**: `runs.turn_end.end_turn` of an interactive turn that asks, as the
  worker calls it once the engine exited, to its commit and the hooks run on it: the claim
  checked with the run locked, the turn's usage and its duration counted, the question, the run
  waiting, its events, the webhooks to tell; after the commit, the dispatch of the freed slot.
  The path behind latency (c) of docs/benchmarks.md (issue #43).

Transaction control (BEGIN, COMMIT, savepoints) is not counted: the test's own transaction turns
the service's into savepoints.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.jobs import create_job

pytestmark = pytest.mark.django_db

CREATE_AT_MOST = 8
ASKING_TURN_END_AT_MOST = 8


def claim_at_most() -> int:
    return 6 if connection.features.has_select_for_update else 5  # the dispatch lock, where rows are locked


@pytest.fixture(autouse=True)
def haiku(install_skill, settings):
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 4
    install_skill("haiku-writer")


def statements_of(captured: CaptureQueriesContext) -> list[str]:
    return [
        query["sql"] for query in captured.captured_queries if not query["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]


def listed(statements: list[str]) -> str:
    return "\n".join(f"  {n}. {sql[:400]}" for n, sql in enumerate(statements, 1))


def test_creating_a_run_R_CR1(api, manual_dispatch, django_capture_on_commit_callbacks):
    from runs.services import claim_turn

    with django_capture_on_commit_callbacks(execute=True):
        warm_up = create_job(api, input={"topic": "warm-up"})["request_id"]  # the owner's place made
    assert claim_turn(warm_up, 1, "host:1:w") is not None  # running: the new run is the owner's one queued
    with CaptureQueriesContext(connection) as captured:
        with django_capture_on_commit_callbacks(execute=True):
            request_id = create_job(api, input={"topic": "counted"})["request_id"]
    statements = statements_of(captured)
    assert (request_id, 1) in manual_dispatch.enqueued  # the dispatch was counted too
    assert len(statements) <= CREATE_AT_MOST, (
        f"creating a run took {len(statements)} statements (at most {CREATE_AT_MOST}):\n{listed(statements)}"
    )


def test_claiming_a_turn_R_CR1(api, bob_api, manual_dispatch, django_capture_on_commit_callbacks):
    from runs.models import Run
    from runs.services import claim_turn

    bobs = create_job(bob_api)["request_id"]
    assert claim_turn(bobs, 1, "host:1:w") is not None  # Bob holds a slot: fair share reads him too
    request_id = create_job(api)["request_id"]
    with CaptureQueriesContext(connection) as captured:
        with django_capture_on_commit_callbacks(execute=False):
            assert claim_turn(request_id, 1, "host:1:w") is not None
    statements = statements_of(captured)
    assert Run.objects.get(pk=request_id).status == "running"
    assert len(statements) <= claim_at_most(), (
        f"claiming a turn took {len(statements)} statements (at most {claim_at_most()}):\n{listed(statements)}"
    )


def test_ending_an_asking_turn_R_CR1(api, manual_dispatch, django_capture_on_commit_callbacks):
    from engines.types import TurnResult
    from runs.models import Run
    from runs.services import claim_turn
    from runs.turn_end import end_turn

    def asking_turn_ended() -> tuple[str, list[str]]:
        request_id = create_job(api, runtime_options={"execution_mode": "interactive"})["request_id"]
        run = claim_turn(request_id, 1, "host:1:w")
        assert run is not None
        turn = TurnResult(outcome="ask_user", assistant_text="Which season?", session_handle="thread-1", exit_code=0)
        with CaptureQueriesContext(connection) as captured:
            with django_capture_on_commit_callbacks(execute=True):
                end_turn(
                    run, "host:1:w", turn, duration_ms=5, can_continue=True, logs_with_keys=[], answer_redacted=False
                )
        return request_id, statements_of(captured)

    asking_turn_ended()  # the first one makes the duration bucket's counter row
    request_id, statements = asking_turn_ended()
    assert Run.objects.get(pk=request_id).status == "waiting_user"
    assert len(statements) <= ASKING_TURN_END_AT_MOST, (
        f"ending an asking turn took {len(statements)} statements (at most {ASKING_TURN_END_AT_MOST}):\n{listed(statements)}"
    )
