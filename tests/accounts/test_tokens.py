"""API tokens (SPEC §8, R-OP3): hashed at rest, revocable, and `create_api_token` prints the key alone
on the last line."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def test_key_is_stored_hashed(alice):
    token, key = ApiToken.issue(alice)
    stored = ApiToken.objects.get(pk=token.pk)
    assert key not in (stored.key_hash, stored.lookup)
    assert key[len("sr_") :] not in stored.key_hash
    assert ApiToken.objects.for_key(key) == token


def test_each_issue_is_a_new_key(alice):
    keys = {ApiToken.issue(alice)[1] for _ in range(5)}
    assert len(keys) == 5


@pytest.mark.parametrize(
    "transform",
    [
        lambda k: k[:-1] + ("A" if k[-1] != "A" else "B"),
        lambda k: k + "x",
        lambda k: k[:-5],
        lambda k: "",
        lambda k: k.upper(),
        lambda k: "sr_" + "0" * 40,
    ],
)
def test_wrong_keys_match_nothing(alice, transform):
    _, key = ApiToken.issue(alice)
    assert ApiToken.objects.for_key(transform(key)) is None


def test_revoked_token_matches_nothing(alice):
    token, key = ApiToken.issue(alice)
    token.revoked_at = timezone.now()
    token.save()
    assert ApiToken.objects.for_key(key) is None


def test_revoking_one_token_leaves_the_others(alice):
    first, first_key = ApiToken.issue(alice)
    _, second_key = ApiToken.issue(alice)
    ApiToken.objects.filter(pk=first.pk).update(revoked_at=timezone.now())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {first_key}")
    assert client.get("/v1/jobs").status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Token {second_key}")
    assert client.get("/v1/jobs").status_code == 200


def test_key_does_not_appear_in_str(alice):
    token, key = ApiToken.issue(alice)
    assert key not in str(token)


def _create_token(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_api_token_prints_the_key_alone_on_the_last_line():
    """R-OP3: the key alone on the last line of the output; the user is created when missing."""
    out, _ = _create_token("carol")
    last = out.rstrip("\n").splitlines()[-1]
    assert last == last.strip() and " " not in last
    user = get_user_model().objects.get(username="carol")
    assert not user.is_staff
    assert ApiToken.objects.for_key(last).user == user
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {last}")
    assert client.get("/v1/jobs").status_code == 200


def test_create_api_token_staff_and_existing_user(alice):
    out, _ = _create_token("alice", "--staff")
    key = out.strip().splitlines()[-1]
    alice.refresh_from_db()
    assert alice.is_staff
    assert alice.check_password("alice-password-123")  # an existing user keeps their password
    assert ApiToken.objects.for_key(key).user == alice
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.post("/v1/skill-packages/install", {}, format="multipart").status_code != 403


def test_created_user_cannot_log_in_with_a_password():
    _create_token("dave")
    assert not get_user_model().objects.get(username="dave").has_usable_password()


def test_last_used_is_recorded_but_not_on_every_request(alice):
    token, key = ApiToken.issue(alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/v1/jobs").status_code == 200
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    assert client.get("/v1/jobs").status_code == 200
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first
