"""Browser forms share the API's rate limits, and failed logins are throttled (R-FS1)."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.throttling import SimpleRateThrottle

from runs.models import Run
from tests.conftest import BUNDLED_SKILLS
from tests.support.jobs import upload, zip_folder
from tests.support.throttling import forget_throttling

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def browser_at_one_per_minute(monkeypatch):
    """`browser_at_one_per_minute(user, scope)`: a browser logged in as `user` whose rate `scope`
    allows one request a minute, counted from zero and forgotten afterwards."""
    users = []

    def make(user, scope: str) -> Client:
        forget_throttling(user)
        users.append(user)
        monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {scope: "1/min"})
        browser = Client()
        browser.force_login(user)
        return browser

    yield make
    for user in users:
        forget_throttling(user)


def test_new_run_form_shares_the_run_create_limit_R_FS1(
    alice, api, install_skill, fake_codex, browser_at_one_per_minute
):
    install_skill("haiku-writer")
    browser = browser_at_one_per_minute(alice, "run_create")
    form = {"input__topic": "sea", "engine": "codex", "execution_mode": "auto"}
    first = browser.post("/runs/new/haiku-writer/", form)
    assert first.status_code == 302, first.content[:500]
    refused = browser.post("/runs/new/haiku-writer/", form)
    assert refused.status_code == 429 and b"RATE_LIMITED" in refused.content
    api_refused = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "x"}}, format="json"
    )
    assert api_refused.status_code == 429  # one budget across both


def test_rerun_shares_the_run_create_limit_R_FS1(alice, api, install_skill, fake_codex, browser_at_one_per_minute):
    install_skill("haiku-writer")
    fake_codex.script({"message": '{"topic": "sea", "haiku": ["a", "b", "c"], "haiku_file": "artifacts/h.md"}'})
    first = api.post(
        "/v1/jobs", {"skill_id": "haiku-writer", "engine": "codex", "input": {"topic": "sea"}}, format="json"
    )
    browser = browser_at_one_per_minute(alice, "run_create")
    rerun = f"/runs/{first.json()['request_id']}/rerun/"
    assert browser.post(rerun).status_code == 302
    refused = browser.post(rerun, follow=True)
    assert b"The run could not start again" in refused.content and b"(RATE_LIMITED)" in refused.content
    assert Run.objects.count() == 2  # the first run and one re-run


def test_skill_install_form_shares_the_skill_install_limit_R_FS1(admin_user, staff_api, browser_at_one_per_minute):
    browser = browser_at_one_per_minute(admin_user, "skill_install")
    package = zip_folder(BUNDLED_SKILLS / "haiku-writer")
    first = browser.post("/skills/", {"package": upload("haiku.zip", package)})
    assert first.status_code == 302, first.content[:500]
    refused = browser.post("/skills/", {"package": upload("haiku.zip", package)})
    assert refused.status_code == 429 and b"RATE_LIMITED" in refused.content
    api_refused = staff_api.post(
        "/v1/skill-packages/install", {"file": upload("haiku.zip", package)}, format="multipart"
    )
    assert api_refused.status_code == 429  # one budget across both


def test_settings_form_shares_the_settings_limit_with_webhooks_R_FS1(alice, api, browser_at_one_per_minute):
    from accounts.services import email_questions_enabled

    browser = browser_at_one_per_minute(alice, "settings_change")
    saved = browser.post("/settings/", {"email": "alice@example.com", "email_questions": "on"})
    assert saved.status_code == 302, saved.content[:500]
    refused = browser.post("/settings/", {"email": "mallory@example.com"})
    assert refused.status_code == 429 and b"RATE_LIMITED" in refused.content
    alice.refresh_from_db()
    assert alice.email == "alice@example.com" and email_questions_enabled(alice)  # nothing changed
    webhook = api.post("/v1/webhooks", {"url": "https://example.com/hook"}, format="json")
    assert webhook.status_code == 429  # one budget across both
    assert api.get("/v1/webhooks").status_code == 200  # reads are not counted


@pytest.fixture
def login_limits(settings):
    """Tight login limits, counted from zero: failures an earlier test of this process left in the
    cache (its database table outlives transactional tests) would otherwise count here."""
    from accounts.login import _failure_keys

    settings.SKILLRUNNER_LOGIN_MAX_FAILURES = 3
    settings.SKILLRUNNER_LOGIN_WINDOW_SECONDS = 60
    keys = [
        key
        for address in ("127.0.0.1", "10.0.0.9")
        for username in ("alice", "bob")
        for key in _failure_keys(type("R", (), {"POST": {"username": username}, "META": {"REMOTE_ADDR": address}}))
    ]
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)


def _login(username: str, password: str, address: str = "127.0.0.1"):
    return Client(REMOTE_ADDR=address).post("/accounts/login/", {"username": username, "password": password})


def test_failed_logins_are_throttled_R_FS1(alice, bob, login_limits):
    from accounts.login import _failure_keys

    assert _login("bob", "bob-password-123").status_code == 302  # successes cost nothing
    for _ in range(3):
        assert _login("alice", "wrong").status_code == 200
    refused = _login("alice", "alice-password-123")  # even the right password, until the window ends
    assert refused.status_code == 429 and b"RATE_LIMITED" in refused.content
    assert _login("bob", "bob-password-123").status_code == 429  # the address is throttled too
    assert _login("alice", "alice-password-123", "10.0.0.9").status_code == 429  # and the username
    assert _login("bob", "bob-password-123", "10.0.0.9").status_code == 302
    request = type("R", (), {"POST": {"username": "alice"}, "META": {"REMOTE_ADDR": "127.0.0.1"}})
    cache.delete_many(_failure_keys(request))
    assert _login("alice", "alice-password-123").status_code == 302


def test_the_admin_login_is_the_throttled_login_R_FS1(admin_user, login_limits):
    """Django's admin has a login form of its own, which counts no failures: it must not be a way
    around the limit. It sends people to the one login page, keeping where they were going."""
    browser = Client()
    for path, goes_to in [("/admin/login/", "/admin/"), ("/admin/login/?next=/admin/runs/run/", "/admin/runs/run/")]:
        for method in (browser.get, browser.post):
            response = method(path, {"username": "root", "password": "wrong"} if method == browser.post else None)
            assert response.status_code == 302, (path, method)
            assert response["Location"] == f"/accounts/login/?next={goes_to}"
    for _ in range(3):
        assert _login("root", "wrong").status_code == 200
    assert _login("root", "root-password-123").status_code == 429
    cache.clear()
    signed_in = Client()
    assert (
        signed_in.post("/accounts/login/?next=/admin/", {"username": "root", "password": "root-password-123"})[
            "Location"
        ]
        == "/admin/"
    )
    assert signed_in.get("/admin/").status_code == 200
