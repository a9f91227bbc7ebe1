"""Cancel in waiting_user (R-LC11) for a resumable run; the sticky_process case, whose live engine
process must go away, is in test_sticky_claude.py."""

from __future__ import annotations

import pytest

from tests.support.conversations import (
    AUTO_FRESH,
    ask,
    error_code,
    haiku_done,
    history_of,
    pending_of,
    reply,
    result_of,
    start,
    start_deciding_after_a_second,
    status_of,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _cancel(api, request_id: str) -> dict:
    response = api.post(f"/v1/jobs/{request_id}/cancel")
    assert response.status_code == 200, response.content
    return response.json()


def test_cancel_waiting_resumable_run(api, haiku, fake_codex, settings):
    """R-LC11: a waiting run is canceled with CANCELED_BY_USER; its pending is gone, later replies
    get 409, a second cancel is not accepted, and no further engine turn runs."""
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 1
    fake_codex.script(ask(), haiku_done())
    request_id = start_deciding_after_a_second(api)

    assert _cancel(api, request_id) == {
        "request_id": request_id,
        "run_id": request_id,
        "status": "canceled",
        "accepted": True,
        "message": "the run was canceled",
    }
    status = status_of(api, request_id)
    assert status["status"] == "canceled" and status["error"]["code"] == "CANCELED_BY_USER"
    assert status["pending_interaction_id"] is None and status["wait_deadline_at"] is None
    assert pending_of(api, request_id) is None
    result = result_of(api, request_id)
    assert result["status"] == "canceled" and result["error"]["code"] == "CANCELED_BY_USER"

    late = reply(api, request_id, 1, "too late")
    assert late.status_code == 409 and error_code(late) == "RUN_NOT_WAITING"
    assert _cancel(api, request_id) == {
        "request_id": request_id,
        "run_id": request_id,
        "status": "canceled",
        "accepted": False,
        "message": "the run had already ended (canceled)",
    }
    from runs.supervision import expire_waits

    assert expire_waits() == 0  # a canceled run's deadline never fires
    assert len(fake_codex.invocations()) == 1
    assert history_of(api, request_id)[0]["response"] is None

    fake_codex.script(haiku_done())  # the only slot is free again
    other = start(api, "haiku-writer", runtime_options=AUTO_FRESH)
    assert status_of(api, other)["status"] == "succeeded"


def test_cancel_of_another_users_waiting_run_is_not_found(api, bob_api, haiku, fake_codex):
    fake_codex.script(ask())
    request_id = start(api, "haiku-writer")
    assert bob_api.post(f"/v1/jobs/{request_id}/cancel").status_code == 404
    assert status_of(api, request_id)["status"] == "waiting_user"
