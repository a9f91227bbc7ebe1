"""`/v1/webhooks` and `callback_url` (R-NT1, R-NT2 at registration)."""

from __future__ import annotations

import pytest

from tests.notifications.helpers import fake_dns
from tests.support.jobs import create_job, error_code, job_body

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example.com/skillrunner"


@pytest.fixture
def public_dns(monkeypatch):
    """hooks.example.com resolves to a public address (the resolver is the boundary we fake)."""
    fake_dns(monkeypatch, {"hooks.example.com": ["93.184.215.14"]})


def test_create_answers_201_with_the_secret_once(api, public_dns):
    """R-NT1: 201 {id, url, events, secret, created_at}; the secret never appears again."""
    response = api.post("/v1/webhooks", {"url": HOOK, "events": ["run.waiting_user"]}, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert set(created) == {"id", "url", "events", "secret", "created_at"}
    assert created["url"] == HOOK and created["events"] == ["run.waiting_user"]
    assert len(created["secret"]) >= 32
    listed = api.get("/v1/webhooks").json()
    assert listed == [{key: created[key] for key in ("id", "url", "events", "created_at")}]
    assert created["secret"] not in api.get("/v1/webhooks").content.decode()


def test_events_default_to_all_four(api, public_dns):
    created = api.post("/v1/webhooks", {"url": HOOK}, format="json").json()
    assert created["events"] == ["run.waiting_user", "run.succeeded", "run.failed", "run.canceled"]


@pytest.mark.parametrize(
    "body",
    [
        {"url": HOOK, "events": ["run.started"]},
        {"url": HOOK, "events": []},
        {"url": "ftp://hooks.example.com/x"},
        {"url": "not a url"},
        {"events": ["run.failed"]},
    ],
)
def test_bad_registrations_are_400(api, public_dns, body):
    response = api.post("/v1/webhooks", body, format="json")
    assert response.status_code == 400, response.content


def test_private_destination_is_refused_at_registration(api):
    """R-NT2: a loopback URL is refused with a stable code, and nothing is stored."""
    response = api.post("/v1/webhooks", {"url": "http://127.0.0.1:8000/hook"}, format="json")
    assert response.status_code == 400
    assert error_code(response) == "WEBHOOK_URL_FORBIDDEN"
    assert api.get("/v1/webhooks").json() == []


def test_delete_and_ownership(api, bob_api, public_dns):
    created = api.post("/v1/webhooks", {"url": HOOK}, format="json").json()
    assert bob_api.get("/v1/webhooks").json() == []
    assert bob_api.delete(f"/v1/webhooks/{created['id']}").status_code == 404
    assert api.delete(f"/v1/webhooks/{created['id']}").status_code == 204
    assert api.get("/v1/webhooks").json() == []
    response = api.delete(f"/v1/webhooks/{created['id']}")
    assert response.status_code == 404 and error_code(response) == "WEBHOOK_NOT_FOUND"
    assert api.delete("/v1/webhooks/not-a-number").status_code == 404


def test_needs_authentication(client):
    assert client.get("/v1/webhooks").status_code == 401


def test_in_the_openapi_document(api):
    paths = api.get("/v1/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    assert {"get", "post"} <= set(paths["/v1/webhooks"])
    assert "delete" in paths["/v1/webhooks/{webhook_id}"]
    assert "callback_url" in str(api.get("/v1/schema/", HTTP_ACCEPT="application/json").json()["components"])


def test_callback_url_adds_callback_secret(api, install_skill, manual_dispatch, public_dns):
    """R-NT1: the create answer keeps request_id, cache_hit, status and adds callback_secret."""
    install_skill("haiku-writer")
    answer = create_job(api, callback_url=HOOK, runtime_options={"no_cache": True})
    assert set(answer) == {"request_id", "cache_hit", "status", "callback_secret"}
    assert answer["status"] == "queued" and len(answer["callback_secret"]) >= 32
    plain = create_job(api, runtime_options={"no_cache": True})
    assert set(plain) == {"request_id", "cache_hit", "status"}
    # A run's callback is not one of the user's webhooks.
    assert api.get("/v1/webhooks").json() == []


def test_private_callback_url_is_refused_and_no_run_is_created(api, install_skill, manual_dispatch):
    from runs.models import Run

    install_skill("haiku-writer")
    response = api.post("/v1/jobs", job_body(callback_url="http://169.254.169.254/latest"), format="json")
    assert response.status_code == 400 and error_code(response) == "WEBHOOK_URL_FORBIDDEN"
    assert not Run.objects.exists()


def test_one_user_registers_a_bounded_number_of_webhooks_R_FS2(api, bob_api, settings, public_dns):
    """Every status change of a user's runs is one delivery per endpoint: the count is capped."""
    settings.SKILLRUNNER_USER_MAX_WEBHOOKS = 2
    created = [api.post("/v1/webhooks", {"url": f"{HOOK}/{n}"}, format="json") for n in range(2)]
    assert [response.status_code for response in created] == [201, 201]
    refused = api.post("/v1/webhooks", {"url": f"{HOOK}/3"}, format="json")
    assert refused.status_code == 429
    assert refused.json()["detail"] == {
        "code": "TOO_MANY_WEBHOOKS",
        "message": "you have 2 webhooks, the most one user may have; delete one and try again",
        "limit": 2,
    }
    assert len(api.get("/v1/webhooks").json()) == 2  # nothing half-made
    assert bob_api.post("/v1/webhooks", {"url": HOOK}, format="json").status_code == 201  # a cap per user
    assert api.delete(f"/v1/webhooks/{created[0].json()['id']}").status_code == 204
    assert api.post("/v1/webhooks", {"url": f"{HOOK}/3"}, format="json").status_code == 201


def test_run_callbacks_do_not_count_toward_the_webhook_cap(api, settings, install_skill, manual_dispatch, public_dns):
    settings.SKILLRUNNER_USER_MAX_WEBHOOKS = 1
    install_skill("haiku-writer")
    for _ in range(2):
        create_job(api, callback_url=HOOK, runtime_options={"no_cache": True})
    assert api.post("/v1/webhooks", {"url": HOOK}, format="json").status_code == 201
