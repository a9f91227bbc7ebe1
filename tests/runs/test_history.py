"""Interaction history (R-LC6) and the status counters that summarise it.

Every question and every answer is kept with timestamps, how it was resolved and who answered;
an answered interaction never changes afterwards.
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from tests.support.conversations import ask, ask_envelope, haiku_done, history_of, reply, start, status_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

RECORD_FIELDS = {
    "interaction_id",
    "attempt_number",
    "kind",
    "prompt",
    "payload",
    "asked_at",
    "response",
    "resolution_mode",
    "answered_at",
    "answered_by",
}
NON_STRICT = {"execution_mode": "interactive", "interactive_require_user_reply": False, "session_timeout_sec": 1}


def _ts(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert parsed.tzinfo is not None, value
    return parsed


def _expire_after_deadline(request_id: str) -> None:
    from runs.models import Run
    from runs.supervision import expire_waits

    deadline = Run.objects.get(pk=request_id).wait_deadline_at
    assert deadline is not None
    from django.utils import timezone

    time.sleep(max(0.0, (deadline - timezone.now()).total_seconds()) + 0.05)
    assert expire_waits() == 1


def test_ask_and_reply_history_is_recorded(api, haiku, fake_codex):
    """Seed scenario: 记录 ask/reply 历史 — after an ask and a reply the history holds the
    interaction_id, prompt, response and timestamps."""
    fake_codex.script(ask("Which season should the haiku evoke?"), haiku_done())
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, "late autumn").status_code == 200
    [record] = history_of(api, request_id)
    assert set(record) == RECORD_FIELDS
    assert record["interaction_id"] == 1 and record["attempt_number"] == 1
    assert record["prompt"] == "Which season should the haiku evoke?"
    assert record["response"] == "late autumn"
    assert _ts(record["asked_at"]) <= _ts(record["answered_at"])
    assert record["payload"]["prompt"] == record["prompt"]


def test_user_reply_is_recorded_as_user_reply(api, haiku, fake_codex):
    """Seed scenario: 用户主动回复 — resolution_mode=user_reply, answered by the replying user."""
    fake_codex.script(ask(), haiku_done())
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, "Kyoto").status_code == 200
    [record] = history_of(api, request_id)
    assert (record["resolution_mode"], record["answered_by"]) == ("user_reply", "alice")


def test_timeout_auto_decision_is_recorded_as_auto_decide_timeout(api, haiku, fake_codex):
    """Seed scenario: 超时自动决策 — strict=false and the wait exceeded session_timeout_sec: the system
    generates the reply and records resolution_mode=auto_decide_timeout, answered by nobody."""
    fake_codex.script(ask(), haiku_done())
    request_id = start(api, "haiku-writer", runtime_options=NON_STRICT)
    _expire_after_deadline(request_id)
    [record] = history_of(api, request_id)
    assert record["resolution_mode"] == "auto_decide_timeout"
    assert record["answered_by"] is None
    assert "engine_judgement" in record["response"]
    assert _ts(record["answered_at"]) >= _ts(record["asked_at"])


def test_history_lists_every_question_and_answer_oldest_first_with_counters(api, haiku, fake_codex):
    """R-LC6 + SPEC §8 status fields: interaction_count, auto_decision_count and
    pending_interaction_id follow the history; an open question is listed unanswered."""
    fake_codex.script(
        ask("Which season?"),
        ask_envelope(
            {"interaction_id": 2, "kind": "choose_one", "prompt": "Which mood?", "options": ["calm", "stormy"]}
        ),
        ask("Any word that must appear?"),
        haiku_done(),
    )
    request_id = start(api, "haiku-writer", runtime_options=NON_STRICT)
    status = status_of(api, request_id)
    assert (status["interaction_count"], status["auto_decision_count"], status["pending_interaction_id"]) == (1, 0, 1)

    assert reply(api, request_id, 1, "winter").status_code == 200
    status = status_of(api, request_id)
    assert (status["interaction_count"], status["auto_decision_count"], status["pending_interaction_id"]) == (2, 0, 2)
    history = history_of(api, request_id)
    assert [(h["interaction_id"], h["response"], h["resolution_mode"]) for h in history] == [
        (1, "winter", "user_reply"),
        (2, None, ""),
    ]
    assert history[1]["answered_at"] is None and history[1]["answered_by"] is None
    assert history[1]["kind"] == "choose_one"

    _expire_after_deadline(request_id)
    status = status_of(api, request_id)
    assert (status["interaction_count"], status["auto_decision_count"], status["pending_interaction_id"]) == (3, 1, 3)

    assert reply(api, request_id, 3, "lantern").status_code == 200
    status = status_of(api, request_id)
    assert status["status"] == "succeeded"
    assert (status["interaction_count"], status["auto_decision_count"], status["pending_interaction_id"]) == (
        3,
        1,
        None,
    )
    history = history_of(api, request_id)
    assert [h["interaction_id"] for h in history] == [1, 2, 3]
    assert [h["attempt_number"] for h in history] == [1, 2, 3]
    assert [h["prompt"] for h in history] == ["Which season?", "Which mood?", "Any word that must appear?"]
    assert [h["resolution_mode"] for h in history] == ["user_reply", "auto_decide_timeout", "user_reply"]
    assert [h["answered_by"] for h in history] == ["alice", None, "alice"]
    asked = [_ts(h["asked_at"]) for h in history]
    assert asked == sorted(asked)


def test_answered_interactions_never_change(api, haiku, fake_codex):
    """R-LC6 append-only: later turns, stale replies, idempotency-key reuse and a cancel leave an
    answered record exactly as it was."""
    from runs.models import Interaction

    fake_codex.script(ask("Which season?"), ask("Which mood?"), haiku_done())
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, "spring", idempotency_key="first").status_code == 200
    answered = history_of(api, request_id)[0]
    stored = Interaction.objects.filter(run_id=request_id, interaction_id=1).values().get()

    assert reply(api, request_id, 1, "summer").status_code == 409
    assert reply(api, request_id, 2, "summer", idempotency_key="first").status_code == 409
    assert reply(api, request_id, 1, "spring", idempotency_key="first").status_code == 200  # a retry
    assert api.post(f"/v1/jobs/{request_id}/cancel").json()["accepted"] is True

    assert history_of(api, request_id)[0] == answered
    assert Interaction.objects.filter(run_id=request_id, interaction_id=1).values().get() == stored
    assert [h["response"] for h in history_of(api, request_id)] == ["spring", None]  # the open one stays unanswered


def test_history_of_another_users_run_is_not_found(api, bob_api, haiku, fake_codex):
    fake_codex.script(ask())
    request_id = start(api, "haiku-writer")
    assert bob_api.get(f"/v1/jobs/{request_id}/interaction/history").status_code == 404
