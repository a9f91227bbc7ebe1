"""R-LC5: exactly one of concurrent replies, auto-decisions and cancels wins.

Threads, each with its own database connection, start together on a barrier and race
`submit_reply`, `expire_wait` and `cancel_run` on one waiting run. Run this module against
PostgreSQL (row locks) with

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m pytest tests/scaleout/test_reply_races.py

The `scaleout` tests need PostgreSQL and skip otherwise; the others run on whatever database is
configured, SQLite included (its IMMEDIATE transactions serialise the writers).
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.support.conversations import (
    ask,
    assert_events_consistent,
    events_of,
    haiku_done,
    history_of,
    start_deciding_after_a_second,
    status_of,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ROUNDS = 4
REPLIERS = 4

requires_postgres = pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")),
    reason="needs DATABASE_URL=postgres://… (the race on real row locks)",
)


def _leave_the_queue(api, request_id: str) -> None:
    """End a round's queued run: no task runs it here, and left queued it would keep taking the
    owner's share of the slots (R-FS1), so the next round's turn would never be offered."""
    assert api.post(f"/v1/jobs/{request_id}/cancel").json()["accepted"] is True


def _waiting_run(api, fake_codex, manual_dispatch) -> str:
    """A resumable, non-strict run waiting on interaction 1 whose wait deadline has passed."""
    from runs.models import Run

    fake_codex.script(ask("Which season?"), haiku_done())
    request_id = start_deciding_after_a_second(api)
    manual_dispatch.run_inline(request_id, 1)
    assert status_of(api, request_id)["status"] == "waiting_user"
    # The deadline is moved into the past instead of sleeping through session_timeout_sec.
    Run.objects.filter(pk=request_id).update(wait_deadline_at=timezone.now() - timedelta(seconds=1))
    return request_id


def _race(
    request_id: str, user, *, repliers: int, expirers: int, cancelers: int, retry: bool = False
) -> list[tuple[str, int, object]]:
    """Run the contenders at once; returns (action, index, outcome) with outcome True (won),
    False (lost cleanly) or the unexpected exception. With `retry` every reply is the same one
    (same response, same idempotency key), as a client retrying on a flaky network would send."""
    from kernel.errors import Conflict
    from runs import services
    from runs.models import Run

    actions = (
        [("reply", i) for i in range(repliers)]
        + [("expire", i) for i in range(expirers)]
        + [("cancel", i) for i in range(cancelers)]
    )
    barrier = threading.Barrier(len(actions))
    outcomes: list[tuple[str, int, object]] = []
    lock = threading.Lock()

    def contender(action: str, index: int) -> None:
        try:
            run = Run.objects.get(pk=request_id)
            barrier.wait(timeout=20)
            if action == "reply":
                try:
                    tag = "retried" if retry else index
                    services.submit_reply(
                        run, user=user, interaction_id=1, response=f"answer {tag}", idempotency_key=f"key-{tag}"
                    )
                    outcome: object = True
                except Conflict:
                    outcome = False
            elif action == "expire":
                outcome = services.expire_wait(request_id) is not None
            else:
                outcome = services.cancel_run(run)[1]
        except Exception as exc:  # noqa: BLE001 - any other failure is a finding
            outcome = exc
        finally:
            connection.close()
        with lock:
            outcomes.append((action, index, outcome))

    threads = [threading.Thread(target=contender, args=action, daemon=True) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a contender hung"
    errors = [o for o in outcomes if not isinstance(o[2], bool)]
    assert not errors, errors
    return outcomes


def _replies_and_auto_decisions_race(api, alice, fake_codex, manual_dispatch) -> None:
    from runs.models import Interaction

    for _ in range(ROUNDS):
        request_id = _waiting_run(api, fake_codex, manual_dispatch)
        manual_dispatch.enqueued.clear()
        outcomes = _race(request_id, alice, repliers=REPLIERS, expirers=2, cancelers=0)

        winners = [(action, index) for action, index, won in outcomes if won]
        assert len(winners) == 1, outcomes
        action, index = winners[0]
        answers = Interaction.objects.filter(run_id=request_id).exclude(resolution_mode="")
        assert answers.count() == 1
        answer = answers.get()
        status = status_of(api, request_id)
        assert (
            status["status"] == "queued" and status["attempt_number"] == 2 and status["pending_interaction_id"] is None
        )
        if action == "reply":
            assert (answer.response, answer.resolution_mode, answer.answered_by.username) == (
                f"answer {index}",
                "user_reply",
                "alice",
            )
            assert status["auto_decision_count"] == 0
        else:
            assert (answer.resolution_mode, answer.answered_by) == ("auto_decide_timeout", None)
            assert status["auto_decision_count"] == 1
        events = events_of(api, request_id)
        assert_events_consistent(events)
        assert [e["kind"] for e in events].count("interaction_reply") == 1
        assert [(e["payload"]["from"], e["payload"]["to"]) for e in events if e["kind"] == "status"][-1] == (
            "waiting_user",
            "queued",
        )
        # The next turn is queued exactly once.
        assert [e for e in manual_dispatch.enqueued if e[0] == request_id] == [(request_id, 2)]
        assert [h["response"] for h in history_of(api, request_id)] == [answer.response]
        _leave_the_queue(api, request_id)


def _replies_auto_decisions_and_cancels_race(api, alice, fake_codex, manual_dispatch) -> None:
    from runs.models import Interaction

    for _ in range(ROUNDS):
        request_id = _waiting_run(api, fake_codex, manual_dispatch)
        manual_dispatch.enqueued.clear()
        outcomes = _race(request_id, alice, repliers=REPLIERS, expirers=1, cancelers=2)

        events = events_of(api, request_id)
        assert_events_consistent(events)
        changes = [(e["payload"]["from"], e["payload"]["to"]) for e in events if e["kind"] == "status"]
        left_waiting = [change for change in changes if change[0] == "waiting_user"]
        assert len(left_waiting) == 1, changes  # exactly one contender ended the wait
        resolved = [(a, i) for a, i, won in outcomes if won and a in ("reply", "expire")]
        accepted_cancels = [i for a, i, won in outcomes if won and a == "cancel"]
        answers = Interaction.objects.filter(run_id=request_id).exclude(resolution_mode="").count()
        if left_waiting[0][1] == "canceled":  # a cancel won: nobody answered
            assert resolved == [] and answers == 0, outcomes
        else:  # a reply or the auto-decision won; a cancel then ended the queued run
            assert left_waiting[0][1] == "queued"
            assert len(resolved) == 1 and answers == 1, outcomes
            assert changes[-1] == ("queued", "canceled")
        assert len(accepted_cancels) == 1, outcomes  # the other cancel found a terminal run
        status = status_of(api, request_id)
        assert status["status"] == "canceled" and status["error"]["code"] == "CANCELED_BY_USER"
        assert [e["kind"] for e in events].count("interaction_reply") == answers


def _retried_reply_race(api, alice, fake_codex, manual_dispatch) -> None:
    from runs.models import Interaction

    for _ in range(ROUNDS):
        request_id = _waiting_run(api, fake_codex, manual_dispatch)
        manual_dispatch.enqueued.clear()
        outcomes = _race(request_id, alice, repliers=REPLIERS, expirers=0, cancelers=0, retry=True)
        assert all(won for _, _, won in outcomes), outcomes  # every retry gets the original answer
        answers = Interaction.objects.filter(run_id=request_id).exclude(resolution_mode="")
        assert [a.response for a in answers] == ["answer retried"]
        assert status_of(api, request_id)["attempt_number"] == 2
        assert [e for e in manual_dispatch.enqueued if e[0] == request_id] == [(request_id, 2)]
        assert [e["kind"] for e in events_of(api, request_id)].count("interaction_reply") == 1
        _leave_the_queue(api, request_id)


@pytest.mark.scaleout
@requires_postgres
def test_exactly_one_of_concurrent_replies_and_auto_decisions_wins_on_postgres(
    api, alice, fake_codex, manual_dispatch, install_skill
):
    """R-LC5 on PostgreSQL: replies (different responses and keys) and two supervisors' deadline
    expiries race; one answer, one resumed turn, one consistent event log."""
    install_skill("haiku-writer")
    assert connection.vendor == "postgresql"
    _replies_and_auto_decisions_race(api, alice, fake_codex, manual_dispatch)


@pytest.mark.scaleout
@requires_postgres
def test_exactly_one_of_concurrent_replies_auto_decisions_and_cancels_wins_on_postgres(
    api, alice, fake_codex, manual_dispatch, install_skill
):
    """R-LC5 + R-LC11 on PostgreSQL: with cancels in the race, exactly one contender takes the run
    out of waiting_user; history has one answer unless a cancel came first."""
    install_skill("haiku-writer")
    assert connection.vendor == "postgresql"
    _replies_auto_decisions_and_cancels_race(api, alice, fake_codex, manual_dispatch)


@pytest.mark.scaleout
@requires_postgres
def test_concurrent_retries_of_one_reply_record_one_answer_on_postgres(
    api, alice, fake_codex, manual_dispatch, install_skill
):
    """R-LC5 on PostgreSQL: the same reply (same idempotency key) sent concurrently is accepted
    every time and recorded once."""
    install_skill("haiku-writer")
    assert connection.vendor == "postgresql"
    _retried_reply_race(api, alice, fake_codex, manual_dispatch)


def test_concurrent_retries_of_one_reply_record_one_answer(api, alice, fake_codex, manual_dispatch, install_skill):
    """R-LC5 on the configured database (SQLite with IMMEDIATE transactions by default)."""
    install_skill("haiku-writer")
    _retried_reply_race(api, alice, fake_codex, manual_dispatch)


def test_exactly_one_of_concurrent_replies_and_auto_decisions_wins(
    api, alice, fake_codex, manual_dispatch, install_skill
):
    """R-LC5 on the configured database (SQLite with IMMEDIATE transactions by default)."""
    install_skill("haiku-writer")
    _replies_and_auto_decisions_race(api, alice, fake_codex, manual_dispatch)


def test_exactly_one_of_concurrent_replies_auto_decisions_and_cancels_wins(
    api, alice, fake_codex, manual_dispatch, install_skill
):
    """R-LC5 + R-LC11 on the configured database (SQLite with IMMEDIATE transactions by default)."""
    install_skill("haiku-writer")
    _replies_auto_decisions_and_cancels_race(api, alice, fake_codex, manual_dispatch)
