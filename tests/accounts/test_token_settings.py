"""The settings page's API tokens (issue 41, item 9): a name and an expiry for each new token, a
clear error for a name in use, active tokens listed and ended ones folded away, post/redirect/get."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_a_new_token_has_its_name_and_expiry_and_is_shown_once(browser, alice):
    created = browser.post("/settings/tokens/", {"name": "backup job", "lifetime": "90"})
    assert created.status_code == 302 and created["Location"] == "/settings/#tokens"
    token = ApiToken.objects.get(user=alice)
    assert token.name == "backup job"
    assert abs(token.expires_at - (timezone.now() + timedelta(days=90))) < timedelta(minutes=1)
    shown = browser.get("/settings/").content.decode()
    assert "New token <strong>backup job</strong>" in shown and 'data-copy="new-token-key"' in shown
    assert f'<time datetime="{token.expires_at.isoformat(timespec="seconds")[:19]}' in shown.replace("+00:00", "")
    again = browser.get("/settings/").content.decode()
    assert "new-token-key" not in again and "backup job" in again  # listed, the key not shown again
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_never_is_no_expiry(browser, alice):
    assert browser.post("/settings/tokens/", {"name": "forever", "lifetime": ""}).status_code == 302
    assert ApiToken.objects.get(user=alice).expires_at is None


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"lifetime": "30"}, "This field is required."),
        ({"name": "   ", "lifetime": "30"}, "This field is required."),
        ({"name": "x" * 101}, "Ensure this value has at most 100 characters"),
        ({"name": "ok", "lifetime": "7000"}, "Select a valid choice."),
    ],
)
def test_a_bad_form_makes_nothing_and_says_why(browser, alice, data, error):
    refused = browser.post("/settings/tokens/", data)
    assert refused.status_code == 400 and error in refused.content.decode()
    assert not ApiToken.objects.filter(user=alice).exists()


def test_a_name_in_use_is_refused_with_its_code_and_the_form_kept(browser, alice):
    browser.post("/settings/tokens/", {"name": "ci", "lifetime": "30"})
    refused = browser.post("/settings/tokens/", {"name": "ci", "lifetime": "365"})
    html = refused.content.decode()
    assert refused.status_code == 409
    assert "you already have an active token named &#x27;ci&#x27;" in html and "(TOKEN_NAME_TAKEN)" in html
    assert 'value="ci"' in html and '<option value="365" selected>' in html  # what was typed is kept
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_revoked_and_expired_tokens_are_folded_away(browser, alice):
    active, _ = ApiToken.issue(alice, name="active one")
    revoked, _ = ApiToken.issue(alice, name="revoked one")
    expired, _ = ApiToken.issue(alice, name="expired one")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    html = browser.get("/settings/").content.decode()
    table, folded = html.split('<table class="tokens">', 1)[1].split("</table>", 1)
    assert "active one" in table and "revoked one" not in table and "expired one" not in table
    assert "<summary>Revoked and expired (2)</summary>" in folded
    ended = folded.split("</details>", 1)[0]
    assert "revoked one" in ended and "expired one" in ended and "revoked <time" in ended and "expired <time" in ended
    assert ended.count("<form") == 0  # nothing left to revoke
    assert f"/settings/tokens/{active.pk}/revoke/" in table


def test_the_admin_lists_tokens_with_their_name_and_expiry(admin_user, alice):
    ApiToken.issue(alice, name="billing export", expires_at=timezone.now() + timedelta(days=30))
    ApiToken.issue(alice, name="no end")
    staff = Client()
    staff.force_login(admin_user)
    page = staff.get("/admin/accounts/apitoken/").content.decode()
    assert "column-name" in page and "column-expires_at" in page
    assert "billing export" in page and "no end" in page
    expiring = staff.get("/admin/accounts/apitoken/", {"expires_at__isnull": "False"}).context["cl"].result_list
    assert [token.name for token in expiring] == ["billing export"]
