"""Credentials as upstream's clients send them (R-UP2) and the handshake (R-UP3)."""

from __future__ import annotations

import base64

import pytest
from rest_framework.test import APIClient

from tests.support.jobs import create_job, error_code, haiku_step

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


@pytest.fixture
def carol(django_user_model):
    return django_user_model.objects.create_user("carol", password=PASSWORD)


def test_bearer_is_the_same_api_token(api, install_skill, fake_codex):
    """The plugin's model cache sends `Authorization: Bearer <key>`."""
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(api)["request_id"]
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {api.token_key}")
    assert bearer.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    assert bearer.get("/v1/engines/codex/models").status_code == 200
    bearer.credentials(HTTP_AUTHORIZATION="Bearer not-a-key")
    response = bearer.get(f"/v1/jobs/{rid}")
    assert response.status_code == 401


def test_basic_with_a_users_password(carol, install_skill, fake_codex):
    """The plugin's management client sends HTTP Basic; the runs it lists are the caller's own."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=_basic("carol", PASSWORD))
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    rid = create_job(client)["request_id"]
    runs = client.get("/v1/management/runs?limit=5").json()["runs"]
    assert [run["request_id"] for run in runs] == [rid]
    assert runs[0] == {
        "request_id": rid,
        "run_id": rid,
        "status": "succeeded",
        "engine": "codex",
        "model": "",
        "skill_id": "haiku-writer",
        "updated_at": runs[0]["updated_at"],
        "pending_interaction_id": None,
        "interaction_count": 0,
    }


def test_management_runs_are_only_the_callers(api, bob_api, install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script(haiku_step(), haiku_step())
    mine = create_job(api)["request_id"]
    create_job(bob_api)
    assert [run["request_id"] for run in api.get("/v1/management/runs").json()["runs"]] == [mine]


@pytest.mark.parametrize("limit", ["0", "-1", "x", "501", "1e3"])
def test_management_runs_limit_is_checked(api, limit):
    response = api.get(f"/v1/management/runs?limit={limit}")
    assert response.status_code == 400
    assert error_code(response) == "INVALID_LIMIT"


def test_wrong_password_is_401_with_a_basic_challenge_on_management_paths(carol):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=_basic("carol", "wrong"))
    response = client.get("/v1/management/runs")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Token, Basic realm="Skill Runner"'
    # Without credentials too: that 401 is what makes the plugin ask for a password.
    assert APIClient().get("/v1/management/runs")["WWW-Authenticate"] == 'Token, Basic realm="Skill Runner"'
    # Other paths keep the Token challenge: a browser answers Basic with a password prompt.
    assert APIClient().get("/v1/jobs")["WWW-Authenticate"] == "Token"


def test_basic_failures_count_toward_the_login_limit(carol, settings):
    """Basic is no way around the login form's throttle (R-FS1): past the limit even the right
    password is refused for the window."""
    from django.core.cache import cache

    from accounts.login import failure_keys

    settings.SKILLRUNNER_LOGIN_MAX_FAILURES = 3
    cache.delete_many(failure_keys("127.0.0.1", "carol"))
    client = APIClient(REMOTE_ADDR="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=_basic("carol", "wrong"))
    assert [client.get("/v1/jobs").status_code for _ in range(3)] == [401, 401, 401]
    client.credentials(HTTP_AUTHORIZATION=_basic("carol", PASSWORD))
    response = client.get("/v1/jobs")
    assert response.status_code == 429
    assert error_code(response) == "RATE_LIMITED"
    cache.delete_many(failure_keys("127.0.0.1", "carol"))
    assert client.get("/v1/jobs").status_code == 200


def test_inactive_user_cannot_use_basic(carol):
    carol.is_active = False
    carol.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=_basic("carol", PASSWORD))
    assert client.get("/v1/jobs").status_code == 401


def test_ping_and_handshake_need_no_credentials(db):
    client = APIClient()
    ping = client.get("/v1/system/ping")
    assert (ping.status_code, ping.content) == (204, b"")
    assert client.head("/v1/system/ping").status_code == 204
    client.credentials(HTTP_AUTHORIZATION="Token revoked-or-wrong")  # not even read
    response = client.post(
        "/v1/system/handshake",
        {
            "schema": "zotero-agents.skillrunner-handshake.request.v1",
            "client": {"name": "zotero-agents", "version": "0.5.6"},
            "requested_protocols": [
                "skillrunner.job.v1",
                "skillrunner.sequence.v1",
                "skillrunner.interaction-files.v1",
            ],
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["schema"] == "zotero-agents.skillrunner-handshake.response.v1"
    assert body["backend"]["name"] and body["backend"]["version"]
    assert body["protocols"] == {
        "skillrunner.job.v1": {"supported": True},
        "skillrunner.sequence.v1": {"supported": False},
        "skillrunner.interaction-files.v1": {
            "supported": True,
            "max_files": 8,
            "max_file_bytes": 10 * 1024 * 1024,
            "max_total_bytes": 25 * 1024 * 1024,
        },
    }


def test_handshake_without_file_protocol_announces_no_limits(db):
    response = APIClient().post(
        "/v1/system/handshake",
        {"schema": "zotero-agents.skillrunner-handshake.request.v1", "requested_protocols": []},
        format="json",
    )
    assert response.json()["protocols"] == {"skillrunner.job.v1": {"supported": True}}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "HANDSHAKE_SCHEMA_UNSUPPORTED"),
        ({"schema": "something.else.v9"}, "HANDSHAKE_SCHEMA_UNSUPPORTED"),
        ([], "HANDSHAKE_INVALID"),
        ("text", "HANDSHAKE_INVALID"),
        (
            {"schema": "zotero-agents.skillrunner-handshake.request.v1", "requested_protocols": "skillrunner.job.v1"},
            "HANDSHAKE_INVALID",
        ),
        ({"schema": "zotero-agents.skillrunner-handshake.request.v1", "requested_protocols": [1]}, "HANDSHAKE_INVALID"),
        ({"schema": "zotero-agents.skillrunner-handshake.request.v1", "client": "zotero"}, "HANDSHAKE_INVALID"),
    ],
)
def test_malformed_handshakes_are_400(db, body, code):
    response = APIClient().post("/v1/system/handshake", body, format="json")
    assert response.status_code == 400
    assert error_code(response) == code


def test_handshake_that_is_not_json_is_400(db):
    response = APIClient().post("/v1/system/handshake", "{not json", content_type="application/json")
    assert response.status_code == 400


@pytest.mark.parametrize(
    "engine,provider,efforts",
    [
        ("codex", "openai", ["minimal", "low", "medium", "high"]),
        ("qwen", "dashscope", ["low", "medium", "high", "xhigh", "max"]),
        ("opencode", "openai", ["minimal", "low", "medium", "high"]),
        ("kilo", "openai", ["minimal", "low", "medium", "high"]),
    ],
)
def test_models_carry_upstreams_fields(api, engine, provider, efforts):
    models = api.get(f"/v1/engines/{engine}/models").json()["models"]
    assert models
    for model in models:
        assert model["provider_id"] == provider
        assert model["model"] == model["id"]
        assert model["deprecated"] is False
        assert model["supported_effort"] == efforts
    assert {model["supported_effort"] == [] for model in api.get("/v1/engines/gemini/models").json()["models"]} == {
        True
    }


def test_ui_opens_the_pages(db):
    response = APIClient().get("/ui")
    assert response.status_code == 302
    assert response["Location"] == "/"
