"""Authentication on the API (SPEC §8): token header or browser session; 401 + WWW-Authenticate: Token."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.support.jobs import create_job, haiku_step

pytestmark = pytest.mark.django_db(transaction=True)

RUN = "/v1/jobs/{rid}"
# (method, path) of every endpoint that must refuse anonymous callers.
PROTECTED = [
    ("get", "/v1/skills"),
    ("get", "/v1/skills/haiku-writer"),
    ("post", "/v1/skill-packages/install"),
    ("get", "/v1/engines"),
    ("get", "/v1/engines/codex/models"),
    ("get", "/v1/jobs"),
    ("post", "/v1/jobs"),
    ("get", RUN),
    ("post", RUN + "/upload"),
    ("get", RUN + "/interaction/pending"),
    ("post", RUN + "/interaction/reply"),
    ("get", RUN + "/interaction/history"),
    ("post", RUN + "/cancel"),
    ("get", RUN + "/result"),
    ("get", RUN + "/artifacts"),
    ("get", RUN + "/artifacts/artifacts/haiku.md"),
    ("get", RUN + "/bundle"),
    ("get", RUN + "/logs"),
    ("get", RUN + "/logs?attempt=1&stream=stdout"),
    ("get", RUN + "/events/history?after_seq=0"),
    ("get", RUN + "/events"),
]


@pytest.fixture
def finished_run(api, install_skill, fake_codex) -> str:
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    return create_job(api)["request_id"]


def _call(client: APIClient, method: str, path: str):
    if method == "post":
        return client.post(path, {}, format="json")
    return client.get(path)


def test_anonymous_request_gets_401_with_token_challenge(finished_run):
    """SPEC §8: no credentials → 401 and `WWW-Authenticate: Token`, on every endpoint."""
    client = APIClient()
    wrong = {}
    for method, path in PROTECTED:
        response = _call(client, method, path.format(rid=finished_run))
        if (
            response.status_code != 401
            # The first challenge: management and skill-package paths name Basic after it (R-UP2).
            or response.get("WWW-Authenticate", "").split(",")[0] != "Token"
            or "detail" not in response.json()
        ):
            wrong[f"{method} {path}"] = (response.status_code, response.get("WWW-Authenticate"))
    assert wrong == {}


@pytest.mark.parametrize(
    "header",
    [
        "Token sr_0000000011111111222222223333333344444444",  # well-formed, unknown
        "Token not-a-key",
        "Token",  # keyword without a key
        "Token a b",  # too many parts
    ],
)
def test_bad_token_gets_401(finished_run, header):
    """SPEC §8: a bad token is 401, never a silent anonymous pass or a 500."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    for method, path in [("get", "/v1/jobs"), ("get", RUN.format(rid=finished_run)), ("post", "/v1/jobs")]:
        response = _call(client, method, path)
        assert response.status_code == 401, (header, path, response.content)
        assert response["WWW-Authenticate"] == "Token"


def test_valid_token_is_accepted(api, finished_run):
    response = api.get(RUN.format(rid=finished_run))
    assert response.status_code == 200
    assert response.json()["request_id"] == finished_run


def test_revoked_token_gets_401(api, finished_run):
    from accounts.models import ApiToken

    ApiToken.objects.filter(user=api.user).update(revoked_at=timezone.now())
    response = api.get(RUN.format(rid=finished_run))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_token_of_deactivated_user_gets_401(api, alice, finished_run):
    alice.is_active = False
    alice.save()
    assert api.get("/v1/jobs").status_code == 401


def test_other_auth_schemes_do_not_authenticate(finished_run, api):
    """`Token <key>` and `Bearer <key>` (R-UP2) are credentials: the same key under another scheme is anonymous."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Digest {api.token_key}")
    response = client.get("/v1/jobs")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_browser_session_authenticates_reads(alice, finished_run):
    """SPEC §8: the browser session works as well as a token."""
    client = APIClient()
    client.force_login(alice)
    response = client.get(RUN.format(rid=finished_run))
    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"


def test_session_write_needs_csrf(alice, install_skill):
    """A cookie-authenticated POST without a CSRF token is refused (403), not executed."""
    from runs.models import Run

    install_skill("haiku-writer")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post("/v1/jobs", {"skill_id": "haiku-writer", "input": {"topic": "sea"}}, format="json")
    assert response.status_code == 403
    assert Run.objects.count() == 0


def test_token_use_is_recorded(api, finished_run):
    from accounts.models import ApiToken

    token = ApiToken.objects.get(user=api.user)
    assert token.last_used_at is not None


def test_unknown_run_for_anonymous_is_401_not_404():
    """Authentication is checked before anything is looked up: no probing of run ids."""
    response = APIClient().get(RUN.format(rid=uuid.uuid4()))
    assert response.status_code == 401
