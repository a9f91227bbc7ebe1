"""Resumed turns (R-EN6, R-EN7) and attempt numbering: the reply is the next turn's prompt, the
engine resumes its stored session, and a session id that is missing when the run must wait fails it.
"""

from __future__ import annotations

import pytest

from tests.support.conversations import ask, haiku_done, plan_done, reply, start, status_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _attempt_prompt(request_id: str, attempt: int) -> str:
    from runs.models import Run

    return (Run.objects.get(pk=request_id).records_dir / "logs" / f"attempt-{attempt}.prompt.txt").read_text()


def test_reply_text_is_exactly_the_next_turn_prompt(api, haiku, fake_codex):
    """R-EN6: the resumed turn's prompt is the reply itself — not wrapped, not templated — and the
    engine resumes the session of the first turn."""
    text = 'Late autumn, please.\nMention the lantern; keep it quiet — "no exclamation marks".'
    fake_codex.script(ask(), haiku_done())
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, text).status_code == 200
    first, second = fake_codex.invocations()
    assert second["prompt"] == text
    assert _attempt_prompt(request_id, 2) == text
    assert "resume" in second["argv"] and second["argv"][second["argv"].index("resume") + 1] == first["thread"]
    assert "resume" not in first["argv"]
    assert "haiku-writer" in first["prompt"]  # the first turn names the skill (R-EN6)


@pytest.mark.parametrize(
    "value, prompt",
    [
        pytest.param({"city": "京都", "days": [1, 2]}, '{"city":"京都","days":[1,2]}', id="object"),
        pytest.param(["Kyoto", "Nara"], '["Kyoto","Nara"]', id="list"),
        pytest.param(3, "3", id="number"),
        pytest.param(True, "true", id="bool"),
    ],
)
def test_non_string_reply_becomes_compact_json_prompt(api, haiku, fake_codex, value, prompt):
    """R-EN6: a non-string reply reaches the agent as compact JSON (no spaces, no \\u escapes)."""
    fake_codex.script(ask(), haiku_done())
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, value).status_code == 200
    assert fake_codex.invocations()[1]["prompt"] == prompt
    assert _attempt_prompt(request_id, 2) == prompt


def test_missing_session_id_when_the_run_must_wait_fails_session_resume_failed(api, trip, fake_codex):
    """R-EN7: the engine reported no session id (codex without thread.started) on a turn that
    would wait: the run could never be resumed, so it fails instead of waiting."""
    fake_codex.script(ask(no_thread=True))
    request_id = start(api)
    status = status_of(api, request_id)
    assert status["status"] == "failed", status
    assert status["error"]["code"] == "SESSION_RESUME_FAILED"
    assert status["pending_interaction_id"] is None and status["interaction_count"] == 0


def test_missing_session_id_does_not_matter_when_the_turn_finishes(api, trip, fake_codex):
    """R-EN7 applies only when the run must wait: a finished first turn needs no session."""
    fake_codex.script(plan_done(no_thread=True))
    request_id = start(api)
    assert status_of(api, request_id)["status"] == "succeeded"


def test_attempt_number_increments_once_per_turn(api, haiku, fake_codex):
    """SPEC §1 Attempt: attempt_number starts at 1 and grows by one per resumed turn — in the
    status, in the history and in the per-attempt logs; one engine process per attempt."""
    fake_codex.script(ask("One?"), ask("Two?"), ask("Three?"), haiku_done())
    request_id = start(api, "haiku-writer")
    for number in (1, 2, 3):
        assert status_of(api, request_id)["attempt_number"] == number
        assert reply(api, request_id, number, f"answer {number}").status_code == 200
    status = status_of(api, request_id)
    assert status["status"] == "succeeded" and status["attempt_number"] == 4
    calls = fake_codex.invocations()
    assert [call["turn"] for call in calls] == [0, 1, 2, 3]
    assert len({call["thread"] for call in calls}) == 1
    assert [call["prompt"] for call in calls[1:]] == ["answer 1", "answer 2", "answer 3"]
    history = api.get(f"/v1/jobs/{request_id}/interaction/history").json()["interactions"]
    assert [h["attempt_number"] for h in history] == [1, 2, 3]
    logs = api.get(f"/v1/jobs/{request_id}/logs").json()
    assert [a["attempt_number"] for a in logs["attempts"]] == [1, 2, 3, 4]
    assert logs["prompt"] == "answer 3" and logs["attempt_number"] == 4
    earlier = api.get(f"/v1/jobs/{request_id}/logs", {"attempt": 2}).json()
    assert earlier["attempt_number"] == 2 and earlier["prompt"] == "answer 1"
    streamed = api.get(f"/v1/jobs/{request_id}/logs", {"attempt": 3, "stream": "prompt"})
    assert b"".join(streamed.streaming_content) == b"answer 2"
