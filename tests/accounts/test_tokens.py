"""API tokens (SPEC §8, R-OP3): hashed at rest, revocable, named, expiring, and `create_api_token`
prints the key alone on the last line."""

from __future__ import annotations

import importlib
import io
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.authentication import token_for_key
from accounts.connections import keep_connections, open_connection
from accounts.models import ApiToken
from accounts.services import issue_token
from kernel.errors import ApplicationError, Conflict

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


def test_tokens_made_elsewhere_are_named_token_n(alice):
    first, _ = ApiToken.issue(alice)
    second, _ = ApiToken.issue(alice, name="Token 3")
    third, _ = ApiToken.issue(alice)
    assert (first.name, second.name, third.name) == ("Token 1", "Token 3", "Token 4")  # "Token 3" is taken


def test_create_api_token_takes_a_name_and_refuses_one_in_use(alice):
    out, _ = _create_token("alice", "--name", "nightly export")
    key = out.strip().splitlines()[-1]
    assert ApiToken.objects.for_key(key).name == "nightly export"
    with pytest.raises(CommandError, match="TOKEN_NAME_TAKEN"):
        _create_token("alice", "--name", "nightly export")


def test_a_name_is_unique_among_a_users_active_tokens_only(alice, bob):
    token, _ = issue_token(alice, "ci")
    with pytest.raises(Conflict) as refused:
        issue_token(alice, " ci ")  # the same name once trimmed
    assert refused.value.code == "TOKEN_NAME_TAKEN" and "'ci'" in refused.value.message
    assert issue_token(bob, "ci")[0].name == "ci"  # another user's names are theirs
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert issue_token(alice, "ci")[0].name == "ci"  # a revoked token's name is free again
    ApiToken.objects.filter(user=alice, name="ci", revoked_at=None).update(expires_at=timezone.now())
    assert issue_token(alice, "ci")[0].name == "ci"  # and so is an expired one's


def test_a_lifetime_sets_the_expiry(alice):
    before = timezone.now()
    token, _ = issue_token(alice, "short", timedelta(days=30))
    assert before + timedelta(days=30) <= token.expires_at <= timezone.now() + timedelta(days=30)
    assert issue_token(alice, "forever")[0].expires_at is None


def test_an_expired_token_is_refused_exactly_as_a_revoked_one(alice):
    """SPEC §8: 401 with `WWW-Authenticate: Token` and the NOT_AUTHENTICATED envelope, the same
    answer for a revoked and an expired token; a token about to expire still works."""
    revoked, revoked_key = ApiToken.issue(alice)
    expired, expired_key = ApiToken.issue(alice)
    expiring, expiring_key = ApiToken.issue(alice, expires_at=timezone.now() + timedelta(minutes=1))
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now())
    answers = {}
    for name, key in {"revoked": revoked_key, "expired": expired_key, "expiring": expiring_key}.items():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        response = client.get("/v1/jobs")
        answers[name] = (response.status_code, response.get("WWW-Authenticate"), response.json())
    refused = (401, "Token", {"detail": {"code": "NOT_AUTHENTICATED", "message": "Invalid, revoked or expired token."}})
    assert answers["revoked"] == answers["expired"] == refused
    assert answers["expiring"][0] == 200
    assert ApiToken.objects.for_key(expired_key) is None


def test_expiry_costs_authentication_no_extra_query(alice, django_assert_num_queries):
    """The expiry is a condition of the one statement that finds the token and its user."""
    _, key = ApiToken.issue(alice, expires_at=timezone.now() + timedelta(days=1))
    with django_assert_num_queries(2):  # the token with its user, and its last-used stamp
        assert token_for_key(key).user == alice
    with django_assert_num_queries(1):
        assert token_for_key(key).user == alice


def test_an_expired_tokens_live_connections_end(alice):
    token, _ = ApiToken.issue(alice)
    connection = open_connection(alice, token=token)
    assert keep_connections([connection.pk], renew=True) == {connection.pk}
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now())
    assert keep_connections([connection.pk], renew=True) == set()
    with pytest.raises(ApplicationError) as refused:
        open_connection(alice, token=token)
    assert (refused.value.code, refused.value.status_code) == ("NOT_AUTHENTICATED", 401)


def test_the_migration_names_existing_tokens_in_the_order_they_were_made(alice, bob):
    migration = importlib.import_module("accounts.migrations.0005_token_name_and_expiry")
    tokens = [ApiToken.issue(user)[0] for user in (alice, bob, alice, alice)]
    ApiToken.objects.update(name="")
    migration.name_existing_tokens(django_apps, None)
    names = {token.pk: ApiToken.objects.get(pk=token.pk).name for token in tokens}
    assert list(names.values()) == ["Token 1", "Token 1", "Token 2", "Token 3"]
    assert not ApiToken.objects.exclude(expires_at=None).exists()
