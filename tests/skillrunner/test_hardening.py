"""Deployment hardening (R-FS3): only login and logout routed, artifact names with control
characters never a 500, one switch for HTTPS behind a proxy. Elsewhere: engine binary paths for
staff only (tests/health/test_system.py), exact-origin sockets (tests/live/test_socket_access.py),
file-and-folder zips (tests/runs/test_upload_zips.py)."""

from __future__ import annotations

import io
import json
import zipfile
from urllib.parse import quote

import pytest
from django.test import Client

from tests.support.jobs import HAIKU_DATA, create_job
from tests.support.settings_probe import run_with_production_settings

pytestmark = pytest.mark.django_db(transaction=True)

ODD_NAMES = ["line\nbreak.md", "tab\there.md", "bell\x07.md", "cr\rname.md", 'quote".md']


@pytest.mark.parametrize(
    "url", ["/accounts/password_reset/", "/accounts/password_change/", "/accounts/reset/x/y/", "/accounts/signup/"]
)
def test_only_login_and_logout_are_routed_R_FS3(client, url):
    assert client.get(url).status_code == 404
    assert client.get("/accounts/login/").status_code == 200


def test_artifact_names_with_control_characters_never_500_R_FS3(api, alice, install_skill, fake_codex):
    install_skill("haiku-writer")
    files = {"artifacts/haiku.md": "x\n", **{f"artifacts/{name}": name for name in ODD_NAMES}}
    fake_codex.script({"files": files, "message": json.dumps(HAIKU_DATA)})
    rid = create_job(api)["request_id"]
    listed = api.get(f"/v1/jobs/{rid}/artifacts")
    assert listed.status_code == 200 and set(listed.json()["artifacts"]) >= {f"artifacts/{n}" for n in ODD_NAMES}
    for name in ODD_NAMES:
        response = api.get(f"/v1/jobs/{rid}/artifacts/artifacts/{quote(name)}")
        assert response.status_code == 200, (name, response.status_code)
        assert b"".join(response.streaming_content).decode() == name
        disposition = response["Content-Disposition"]
        assert "\n" not in disposition and "\r" not in disposition
    bundle = api.get(f"/v1/jobs/{rid}/bundle")
    assert bundle.status_code == 200
    with zipfile.ZipFile(io.BytesIO(b"".join(bundle.streaming_content))) as archive:
        assert len(archive.namelist()) >= len(ODD_NAMES)
    browser = Client()
    browser.force_login(alice)
    assert browser.get(f"/runs/{rid}/").status_code == 200
    for name in ODD_NAMES:
        assert browser.get(f"/runs/{rid}/preview/artifacts/{quote(name)}").status_code == 200, name


HTTPS_PROBE = """
import django
django.setup()
from django.conf import settings
from django.test import Client
client = Client()
plain = client.get("/accounts/login/")
print("plain", plain.status_code, plain.get("Location"))
print("probe", client.get("/v1/system/ping").status_code)
secure = client.get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
print("secure", secure.status_code, secure.get("Strict-Transport-Security"))
print("cookies", settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, secure.cookies["csrftoken"]["secure"])
"""


def _probe_https(tmp_path, switch: str) -> list[str]:
    done = run_with_production_settings(HTTPS_PROBE, tmp_path, ALLOWED_HOSTS="testserver", SKILLRUNNER_HTTPS=switch)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_one_switch_turns_on_https_behind_a_proxy_R_FS3(tmp_path):
    assert _probe_https(tmp_path, "true") == [
        "plain 301 https://testserver/accounts/login/",
        "probe 204",
        "secure 200 max-age=31536000",
        "cookies True True True",
    ]
    assert _probe_https(tmp_path, "false") == ["plain 200 None", "probe 204", "secure 200 None", "cookies False False "]
