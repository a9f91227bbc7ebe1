"""Single-user local mode (R-UP1): no credentials needed, and safe only on loopback with agents
behind the provider relay — which the service insists on."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from tests.support.clients import job_body
from tests.support.jobs import error_code, haiku_step
from tests.support.service_processes import REPO
from tests.support.settings_probe import run_with_production_settings

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def local_mode(settings):
    settings.SKILLRUNNER_LOCAL_MODE = True
    settings.SKILLRUNNER_SANDBOX_NETWORK = "provider"
    return settings


def test_a_request_without_credentials_acts_as_the_local_user(local_mode, install_skill, fake_codex):
    install_skill("haiku-writer")
    fake_codex.script(haiku_step())
    client = APIClient()
    response = client.post("/v1/jobs", job_body(), format="json")
    assert response.status_code == 200, response.content
    rid = response.json()["request_id"]
    assert client.get(f"/v1/jobs/{rid}").json()["status"] == "succeeded"
    local = get_user_model().objects.get(username="local")
    assert local.is_staff and not local.has_usable_password()
    assert [run["request_id"] for run in client.get("/v1/management/runs").json()["runs"]] == [rid]


def test_credentials_sent_still_count(local_mode, api, bob):
    """A bad token is 401 even in local mode; a good one acts as its own user, not the local one."""
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-key")
    assert bad.get("/v1/jobs").status_code == 401
    bad.credentials(HTTP_AUTHORIZATION="Basic Ym9iOndyb25n")  # bob:wrong
    assert bad.get("/v1/jobs").status_code == 401
    assert api.get("/v1/management/runs").status_code == 200
    assert not get_user_model().objects.filter(username="local").exists()


def test_local_user_name_is_a_setting(local_mode):
    local_mode.SKILLRUNNER_LOCAL_USER = "zotero"
    assert APIClient().get("/v1/jobs").status_code == 200
    assert get_user_model().objects.get(username="zotero").is_staff


def test_a_deactivated_local_user_is_no_way_in(local_mode):
    APIClient().get("/v1/jobs")
    get_user_model().objects.filter(username="local").update(is_active=False)
    assert APIClient().get("/v1/jobs").status_code == 401


@pytest.mark.parametrize("peer", ["10.0.0.7", "192.168.1.20", "203.0.113.9", "::ffff:10.0.0.7", "fe80::1"])
def test_peers_outside_loopback_are_refused(local_mode, peer):
    response = APIClient(REMOTE_ADDR=peer).get("/v1/system/ping")
    assert response.status_code == 403
    assert error_code(response) == "LOCAL_MODE_LOOPBACK_ONLY"


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.10", "::1"])
def test_loopback_peers_are_served(local_mode, peer):
    assert APIClient(REMOTE_ADDR=peer).get("/v1/jobs").status_code == 200


def test_without_local_mode_anonymous_is_401_and_other_peers_are_served(db):
    assert APIClient().get("/v1/jobs").status_code == 401
    assert APIClient(REMOTE_ADDR="10.0.0.7").get("/v1/system/ping").status_code == 204


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_ORIGIN": "https://evil.example"},
        {"HTTP_ORIGIN": "http://localhost:9999"},
        {"HTTP_SEC_FETCH_SITE": "cross-site"},
    ],
)
def test_another_sites_page_does_not_act_as_the_local_user(local_mode, headers):
    """A browser page of any site can send requests to loopback; without credentials they are not the local user's."""
    response = APIClient(**headers).post("/v1/jobs", job_body(), format="json")
    assert response.status_code == 401


def test_the_services_own_pages_and_non_browser_clients_are_the_local_user(local_mode):
    assert (
        APIClient(HTTP_ORIGIN="http://testserver", HTTP_SEC_FETCH_SITE="same-origin").get("/v1/jobs").status_code == 200
    )
    assert APIClient(HTTP_ORIGIN="null").get("/v1/jobs").status_code == 200


def test_pages_need_no_login(local_mode, client):
    response = client.get("/")
    assert response.status_code == 200
    assert b"local" in response.content


def test_the_local_users_pages_offer_no_log_out(local_mode, client, alice):
    """Issue 41, item 5: the local user has no password; "Log out" led to a form they cannot use.
    Someone who did log in with an account of their own keeps it."""
    html = client.get("/").content.decode()
    assert '<span class="who">local</span>' in html and ">local mode</span>" in html
    assert "Log out" not in html and 'action="/accounts/logout/"' not in html
    client.force_login(alice)
    assert "Log out" in client.get("/").content.decode()


def test_pages_need_a_login_without_local_mode(db, client):
    assert client.get("/").status_code == 302


def _settings_error(tmp_path, **env: str) -> str:
    result = run_with_production_settings(
        "import django; django.setup(); from django.conf import settings; print(settings.SKILLRUNNER_SANDBOX_NETWORK)",
        tmp_path,
        SKILLRUNNER_LOCAL_MODE="true",
        **env,
    )
    return result.stdout.strip() if result.returncode == 0 else result.stderr


def test_local_mode_puts_agents_behind_the_provider_relay(tmp_path):
    assert _settings_error(tmp_path) == "provider"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SKILLRUNNER_SANDBOX_NETWORK": "open"}, "SKILLRUNNER_SANDBOX_NETWORK=provider"),
        ({"SKILLRUNNER_SANDBOX": "off"}, "SKILLRUNNER_SANDBOX=bwrap"),
        ({"ALLOWED_HOSTS": "skillrunner.example.com"}, "ALLOWED_HOSTS must be among"),
        ({"SKILLRUNNER_LOCAL_USER": " "}, "SKILLRUNNER_LOCAL_USER must name a user"),
    ],
)
def test_local_mode_refuses_to_start_unsafe(tmp_path, env, says):
    error = _settings_error(tmp_path, **env)
    assert "ImproperlyConfigured" in error and says in error


def _serve_in_local_mode(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`manage.py serve` in local mode under the production settings, with `env` on top."""
    import os

    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "skillrunner.settings",
        "SKILLRUNNER_DATA_DIR": str(tmp_path),
        "SECRET_KEY": "x" * 50,
        "SKILLRUNNER_LOCAL_MODE": "true",
        **env,
    }
    command = [sys.executable, "manage.py", "serve", *args]
    return subprocess.run(command, env=full_env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_refused_configuration_is_one_line_without_a_traceback(tmp_path):
    """Issue 41, item 13: `manage.py serve` refusing local mode says what to change, once."""
    result = _serve_in_local_mode(tmp_path, "--port", "1", SKILLRUNNER_SANDBOX_NETWORK="open")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("ImproperlyConfigured: SKILLRUNNER_LOCAL_MODE=true serves requests")
    assert "SKILLRUNNER_SANDBOX_NETWORK=provider" in result.stderr


def test_local_mode_refusals_are_coded(local_mode):
    """Issue 41, item 13: a 401 in local mode (a bad token, another site's page) has the API's
    one error shape, and still says how to authenticate."""
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-key")
    refused = bad.get("/v1/jobs")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Token"
    assert refused.json() == {"detail": {"code": "NOT_AUTHENTICATED", "message": "Invalid, revoked or expired token."}}
    foreign = APIClient().get("/v1/jobs", HTTP_SEC_FETCH_SITE="cross-site")
    assert foreign.status_code == 401 and foreign.json()["detail"]["code"] == "NOT_AUTHENTICATED"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_serve_refuses_to_bind_beyond_loopback(tmp_path, host):
    result = _serve_in_local_mode(tmp_path, "--host", host, "--port", "1")
    assert result.returncode == 1
    assert f"binds loopback only (127.0.0.1 or ::1), not {host!r}" in result.stderr
    assert list(tmp_path.rglob("skillrunner.sqlite3")) == []  # refused before the database was prepared


def _inbox_socket(peer: str, origin: bytes = b"http://localhost"):
    from channels.testing import WebsocketCommunicator

    from skillrunner.asgi import application

    socket = WebsocketCommunicator(application, "/ws/inbox/", headers=[(b"origin", origin), (b"host", b"localhost")])
    socket.scope["client"] = [peer, 50000]  # daphne's peer; the coroutine reads it once it runs
    return socket


@pytest.mark.parametrize(
    ("peer", "origin", "opens"),
    [
        ("127.0.0.1", b"http://localhost", True),
        ("10.0.0.7", b"http://localhost", False),
        ("127.0.0.1", b"https://evil.example", False),
    ],
)
def test_the_pages_socket_is_the_local_users_from_loopback_only(local_mode, peer, origin, opens):
    from asgiref.sync import async_to_sync

    async def scenario():
        socket = _inbox_socket(peer, origin)
        connected, _ = await socket.connect()
        first = await socket.receive_json_from(5) if connected else None
        await socket.disconnect()
        return connected, first

    connected, first = async_to_sync(scenario)()
    if opens:
        assert connected and first["type"] == "inbox"
    else:
        assert (connected, first) == (False, None)
