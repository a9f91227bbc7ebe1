"""Request limits (SPEC §8, README "SKILLRUNNER_MAX_JSON_BODY_BYTES", "SKILLRUNNER_RATE_RUN_CREATE,
SKILLRUNNER_RATE_REPLY"): oversized JSON bodies are 413 before anything is read or changed; run
creation and replies are rate limited per user (429 RATE_LIMITED with Retry-After), and a reply
over the run socket counts against the same limit as the REST one (R-UI2: both go through the
same code). Upload and install 413s and the queue-full 429 are covered in tests/runs/test_uploads.py,
tests/skills/test_skill_install.py and tests/runs/test_admission.py."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from rest_framework.throttling import SimpleRateThrottle

from tests.support.throttling import forget_throttling

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = {
    "destination": "Oslo",
    "days": [{"day": 1, "activities": ["walk"]}],
    "plan_file": "artifacts/plan.md",
    "__SKILL_DONE__": True,
}


@pytest.fixture
def rates(monkeypatch, alice, bob):
    """Tight throttle rates for one test; the counters live in the cache, so they start and end empty."""
    forget_throttling(alice, bob)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"run_create": "3/min", "interaction_reply": "2/min"})
    yield
    forget_throttling(alice, bob)


def _job(topic="sea", **extra):
    return {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": topic}, **extra}


def test_oversized_job_body_is_413_and_creates_nothing(api, install_skill, settings):
    from runs.models import Run

    install_skill("haiku-writer")
    settings.SKILLRUNNER_MAX_JSON_BODY_BYTES = 4096
    response = api.post("/v1/jobs", _job(parameter={"padding": "x" * 8192}), format="json")
    assert response.status_code == 413, response.content[:200]
    assert response.json()["detail"]["code"] == "REQUEST_TOO_LARGE"
    assert not Run.objects.exists()


def test_oversized_reply_is_413_and_changes_nothing(api, install_skill, fake_codex, settings):
    from runs.models import Run

    install_skill("trip-planner")
    fake_codex.script(
        {"message": "Where to?"}, {"files": {"artifacts/plan.md": "# Oslo\n"}, "message": json.dumps(PLAN)}
    )
    rid = api.post(
        "/v1/jobs",
        {
            "skill_id": "trip-planner",
            "engine": "codex",
            "input": {},
            "runtime_options": {"execution_mode": "interactive"},
        },
        format="json",
    ).json()["request_id"]
    before = Run.objects.get(pk=rid)
    settings.SKILLRUNNER_MAX_JSON_BODY_BYTES = 4096
    response = api.post(
        f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 1, "response": "x" * 8192}, format="json"
    )
    assert response.status_code == 413
    after = Run.objects.get(pk=rid)
    assert (
        (after.status, after.last_event_seq, after.attempt_number)
        == (before.status, before.last_event_seq, before.attempt_number)
        == ("waiting_user", before.last_event_seq, 1)
    )


def test_run_creation_is_rate_limited_per_user(api, bob_api, install_skill, fake_codex, rates):
    from runs.models import Run

    install_skill("haiku-writer")
    fake_codex.script(
        {
            "files": {"artifacts/haiku.md": "a\nb\nc\n"},
            "message": json.dumps({"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/haiku.md"}),
        }
    )
    codes = [api.post("/v1/jobs", _job(f"t{i}"), format="json").status_code for i in range(3)]
    assert codes == [200, 200, 200]
    refused = api.post("/v1/jobs", _job("one too many"), format="json")
    assert refused.status_code == 429
    assert refused.json()["detail"]["code"] == "RATE_LIMITED"
    assert int(refused["Retry-After"]) > 0
    assert Run.objects.filter(owner=api.user).count() == 3
    assert bob_api.post("/v1/jobs", _job("bob"), format="json").status_code == 200  # per user
    assert api.get("/v1/jobs").status_code == 200  # reads are not throttled


def test_replies_are_rate_limited_on_the_api_and_the_socket_alike(api, install_skill, fake_codex, rates):
    from runs.models import Run

    install_skill("trip-planner")
    fake_codex.script(
        {"message": "Where to?"}, {"files": {"artifacts/plan.md": "# Oslo\n"}, "message": json.dumps(PLAN)}
    )
    rid = api.post(
        "/v1/jobs",
        {
            "skill_id": "trip-planner",
            "engine": "codex",
            "input": {},
            "runtime_options": {"execution_mode": "interactive"},
        },
        format="json",
    ).json()["request_id"]
    stale = [
        api.post(
            f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 99, "response": "x"}, format="json"
        ).status_code
        for _ in range(2)
    ]
    assert stale == [409, 409]
    refused = api.post(f"/v1/jobs/{rid}/interaction/reply", {"interaction_id": 1, "response": "Oslo"}, format="json")
    assert refused.status_code == 429 and refused.json()["detail"]["code"] == "RATE_LIMITED"
    assert Run.objects.get(pk=rid).status == "waiting_user"

    async def socket_reply():
        from skillrunner.asgi import application

        socket = WebsocketCommunicator(
            application,
            f"/ws/runs/{rid}/?after_seq=999",
            headers=[(b"authorization", f"Token {api.token_key}".encode())],
        )
        assert (await socket.connect())[0]
        assert (await socket.receive_json_from(5))["type"] == "snapshot"
        await socket.send_json_to({"type": "reply", "interaction_id": 1, "response": "Oslo"})
        answer = await socket.receive_json_from(10)
        await socket.disconnect()
        return answer

    answer = async_to_sync(socket_reply)()
    assert answer.get("code") == "RATE_LIMITED", answer
    run = Run.objects.get(pk=rid)
    assert run.status == "waiting_user" and run.attempt_number == 1, (run.status, run.attempt_number)


def test_a_reply_has_one_budget_whatever_the_transport(api, client, alice, install_skill, fake_codex, monkeypatch):
    """One way in for a reply (runs.replies.receive_reply): the REST endpoint, the run socket and
    the inbox take from one budget, each reply counted once. With three a minute, one reply by each
    uses it up, and the fourth is refused whichever of them it comes by."""
    from runs.models import Run
    from tests.support.conversations import ask, error_code, reply, start
    from tests.support.web_clients import run_async, run_socket, token_headers

    install_skill("trip-planner")
    fake_codex.script(ask("Where to?"))
    rid = start(api)
    client.force_login(alice)

    def by_rest(interaction_id: int) -> str | None:
        sent = reply(api, rid, interaction_id, "Oslo")
        assert sent.status_code != 429 or int(sent["Retry-After"]) > 0
        return error_code(sent)

    def by_inbox(interaction_id: int) -> str | None:
        form = {"request_id": rid, "interaction_id": str(interaction_id), "response": "Oslo"}
        return error_code(client.post("/inbox/", form, HTTP_ACCEPT="application/json"))

    def by_socket(interaction_id: int) -> str | None:
        async def send() -> dict:
            socket = run_socket(rid, token_headers(api), after_seq=999)
            assert (await socket.connect())[0]
            assert (await socket.receive_json_from(5))["type"] == "snapshot"
            await socket.send_json_to({"type": "reply", "interaction_id": interaction_id, "response": "Oslo"})
            answer = await socket.receive_json_from(10)
            await socket.disconnect()
            return answer

        return run_async(send).get("code")

    forget_throttling(alice)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"interaction_reply": "3/min"})
    try:
        # Each reaches the service (a stale interaction) and is counted once.
        assert [by_rest(99), by_socket(99), by_inbox(99)] == ["INTERACTION_STALE"] * 3
        # The fourth, by any of them, is over the one budget, though the run would take it.
        assert [by_inbox(1), by_socket(1), by_rest(1)] == ["RATE_LIMITED"] * 3
    finally:
        forget_throttling(alice)
    run = Run.objects.get(pk=rid)
    assert run.status == "waiting_user" and run.attempt_number == 1, (run.status, run.attempt_number)
