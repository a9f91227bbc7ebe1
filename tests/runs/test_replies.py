"""Replies (R-LC5): free text or any JSON value, the 400/409 answers, idempotency keys.

Concurrent replies, auto-decisions and cancels are in test_reply_races.py.
"""

from __future__ import annotations

import json

import pytest

from tests.support.conversations import (
    AUTO_FRESH,
    ask,
    ask_envelope,
    error_code,
    haiku_done,
    history_of,
    plan_done,
    reply,
    start,
    status_of,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _prompts(fake_codex) -> list[str]:
    return [call["prompt"] for call in fake_codex.invocations()]


def test_free_text_reply_is_accepted_without_kind_fields(api, trip, fake_codex):
    """Seed scenario: 提交自由文本回复 — a plain string is accepted; no object shaped after `kind`
    is required, and the run goes on with it."""
    fake_codex.script(
        ask_envelope({"interaction_id": 1, "kind": "choose_one", "prompt": "City?", "options": ["Kyoto", "Osaka"]}),
        plan_done(),
    )
    request_id = start(api)
    response = reply(api, request_id, 1, "Somewhere quiet near Kyoto, please, not on the list")
    assert response.status_code == 200, response.content
    # The answer reports the state the reply left: a resumable run queued for its next turn.
    assert response.json() == {"request_id": request_id, "status": "queued", "accepted": True, "mode": "interaction"}
    assert status_of(api, request_id)["status"] == "succeeded"
    assert _prompts(fake_codex)[-1] == "Somewhere quiet near Kyoto, please, not on the list"


@pytest.mark.parametrize("kind", ["open_text", "choose_one", "confirm", "upload_files"])
def test_free_text_reply_accepted_for_every_kind(api, trip, fake_codex, kind):
    """Seed scenario: 各 kind 下均可提交自由文本 — whatever the kind, free text is accepted and the
    orchestration continues; nothing is refused for not matching a fixed reply structure."""
    fake_codex.script(
        ask_envelope({"interaction_id": 1, "kind": kind, "prompt": "Your call?", "options": ["yes", "no"]}), plan_done()
    )
    request_id = start(api)
    assert status_of(api, request_id)["status"] == "waiting_user"
    response = reply(api, request_id, 1, "hmm, neither — surprise me")
    assert response.status_code == 200, response.content
    assert status_of(api, request_id)["status"] == "succeeded"


def test_kind_is_display_only_and_never_constrains_replies(api, trip, fake_codex):
    """Seed scenario: kind 仅兼容展示 — the pending's kind is there for display; the backend does not
    interpret the reply by it: a `confirm` answered with an object and a `choose_one` answered
    with a value outside its options are both taken as they are."""
    fake_codex.script(
        ask_envelope({"interaction_id": 1, "kind": "confirm", "prompt": "Book the ryokan?"}),
        ask_envelope(
            {"interaction_id": 2, "kind": "choose_one", "prompt": "Train or plane?", "options": ["train", "plane"]}
        ),
        plan_done(),
    )
    request_id = start(api)
    assert reply(api, request_id, 1, {"answer": "maybe", "budget": 120}).status_code == 200
    assert reply(api, request_id, 2, "bicycle").status_code == 200
    assert status_of(api, request_id)["status"] == "succeeded"
    assert [h["response"] for h in history_of(api, request_id)] == [{"answer": "maybe", "budget": 120}, "bicycle"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("Kyoto", id="string"),
        pytest.param(3, id="integer"),
        pytest.param(2.5, id="float"),
        pytest.param(True, id="true"),
        pytest.param(False, id="false"),
        pytest.param(["Kyoto", "Nara"], id="list"),
        pytest.param({"city": "京都", "days": [1, 2]}, id="object"),
        pytest.param("", id="empty-string"),
    ],
)
def test_reply_response_may_be_any_json_value(api, haiku, fake_codex, value):
    """R-LC5: `response` may be any JSON value; it is stored as given and reaches the agent."""
    fake_codex.script(ask(), haiku_done())
    request_id = start(api, "haiku-writer")
    response = reply(api, request_id, 1, value)
    assert response.status_code == 200, response.content
    assert history_of(api, request_id)[0]["response"] == value
    expected = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert _prompts(fake_codex)[1].strip() == expected.strip()


def test_reply_response_null_is_a_json_value_too(api, haiku, fake_codex):
    """R-LC5: null is a JSON value as well; it reaches the agent as `null`."""
    fake_codex.script(ask(), haiku_done())
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, None).status_code == 200
    assert history_of(api, request_id)[0]["response"] is None
    assert history_of(api, request_id)[0]["resolution_mode"] == "user_reply"
    assert _prompts(fake_codex)[1] == "null"


def test_reply_to_auto_run_is_400(api, haiku, fake_codex):
    """R-LC5: a run that is not interactive → 400 RUN_NOT_INTERACTIVE."""
    fake_codex.script(haiku_done())
    request_id = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    response = reply(api, request_id, 1, "hello")
    assert response.status_code == 400
    assert error_code(response) == "RUN_NOT_INTERACTIVE"


def test_reply_when_not_waiting_is_409(api, trip, fake_codex, manual_dispatch):
    """R-LC5: queued, running-again (queued for the resumed turn) and finished runs answer 409."""
    fake_codex.script(ask(), plan_done())
    request_id = start(api)
    queued = reply(api, request_id, 1, "too early")
    assert queued.status_code == 409 and error_code(queued) == "RUN_NOT_WAITING"

    manual_dispatch.run_inline(request_id, 1)
    assert reply(api, request_id, 1, "Kyoto").status_code == 200
    again = reply(api, request_id, 1, "Kyoto")
    assert again.status_code == 409 and error_code(again) == "RUN_NOT_WAITING"

    manual_dispatch.run_inline(request_id, 2)
    assert status_of(api, request_id)["status"] == "succeeded"
    late = reply(api, request_id, 1, "Osaka")
    assert late.status_code == 409 and error_code(late) == "RUN_NOT_WAITING"
    assert len(history_of(api, request_id)) == 1


def test_reply_with_stale_interaction_id_is_409(api, haiku, fake_codex):
    """R-LC5: an interaction_id that is not the pending one → 409, and nothing changes."""
    fake_codex.script(ask("First question?"), ask("Second question?"), haiku_done())
    request_id = start(api, "haiku-writer")
    future = reply(api, request_id, 2, "answer to a question not asked yet")
    assert future.status_code == 409 and error_code(future) == "INTERACTION_STALE"
    assert future.json()["detail"]["pending_interaction_id"] == 1

    assert reply(api, request_id, 1, "first answer").status_code == 200
    stale = reply(api, request_id, 1, "first answer, again")
    assert stale.status_code == 409 and error_code(stale) == "INTERACTION_STALE"
    status = status_of(api, request_id)
    assert (
        status["status"] == "waiting_user" and status["pending_interaction_id"] == 2 and status["attempt_number"] == 2
    )
    assert [h["response"] for h in history_of(api, request_id)] == ["first answer", None]


def test_same_idempotency_key_and_response_returns_the_original_answer(api, haiku, fake_codex):
    """R-LC5: a retried reply (same key, same response) is answered as the original was — no second
    answer recorded and no second turn run."""
    fake_codex.script(ask("First?"), ask("Second?"), haiku_done())
    request_id = start(api, "haiku-writer")
    first = reply(api, request_id, 1, {"city": "Kyoto"}, idempotency_key="retry-1")
    assert first.status_code == 200 and first.json()["accepted"] is True
    calls = len(fake_codex.invocations())
    for _ in range(3):
        again = reply(api, request_id, 1, {"city": "Kyoto"}, idempotency_key="retry-1")
        assert again.status_code == 200, again.content
        assert again.json()["accepted"] is True and again.json()["request_id"] == request_id
    assert len(fake_codex.invocations()) == calls
    status = status_of(api, request_id)
    assert status["attempt_number"] == 2 and status["pending_interaction_id"] == 2
    assert [h["response"] for h in history_of(api, request_id)] == [{"city": "Kyoto"}, None]


def test_same_idempotency_key_with_different_response_is_409(api, haiku, fake_codex):
    """R-LC5: the same key with another response → 409; the first answer stands."""
    fake_codex.script(ask("First?"), ask("Second?"), haiku_done())
    request_id = start(api, "haiku-writer")
    assert reply(api, request_id, 1, "Kyoto", idempotency_key="k-1").status_code == 200
    conflict = reply(api, request_id, 2, "Osaka", idempotency_key="k-1")
    assert conflict.status_code == 409 and error_code(conflict) == "IDEMPOTENCY_KEY_REUSED"
    assert status_of(api, request_id)["pending_interaction_id"] == 2
    assert history_of(api, request_id)[0]["response"] == "Kyoto"
    assert reply(api, request_id, 2, "Osaka", idempotency_key="k-2").status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"response": "Kyoto"}, id="no-interaction-id"),
        pytest.param({"interaction_id": 0, "response": "Kyoto"}, id="interaction-id-zero"),
        pytest.param({"interaction_id": "first", "response": "Kyoto"}, id="interaction-id-text"),
        pytest.param({"interaction_id": 1}, id="no-response"),
    ],
)
def test_malformed_reply_is_400_and_changes_nothing(api, trip, fake_codex, body):
    fake_codex.script(ask())
    request_id = start(api)
    response = api.post(f"/v1/jobs/{request_id}/interaction/reply", body, format="json")
    assert response.status_code == 400, response.content
    status = status_of(api, request_id)
    assert status["status"] == "waiting_user" and status["pending_interaction_id"] == 1


def test_reply_to_another_users_run_is_404_and_staff_reply_is_recorded_as_theirs(
    api, bob_api, staff_api, trip, fake_codex
):
    """SPEC §8 ownership: bob cannot see (nor answer) alice's run; staff can, and the history says
    who answered (R-LC6)."""
    fake_codex.script(ask(), plan_done())
    request_id = start(api)
    assert reply(bob_api, request_id, 1, "Osaka").status_code == 404
    assert reply(staff_api, request_id, 1, "Kyoto").status_code == 200
    assert history_of(api, request_id)[0]["answered_by"] == "root"
