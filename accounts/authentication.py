from __future__ import annotations

from django.contrib.auth import authenticate
from django.utils import timezone
from rest_framework import authentication, exceptions

from kernel.errors import ApplicationError

from .login import count_failure, failure_keys, too_many_failures
from .models import ApiToken

LAST_USED_RESOLUTION_SECONDS = 60
# `Authorization: <keyword> <key>` carries an API key under either keyword (R-UP2): upstream's
# clients send Bearer.
TOKEN_KEYWORDS = ("Token", "Bearer")


def token_for_key(key: str) -> ApiToken | None:
    """The active (neither revoked nor expired) token of an active user this API key is, or None;
    shared by the REST API and the websocket."""
    token = ApiToken.objects.for_key(key)
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > LAST_USED_RESOLUTION_SECONDS:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def parse_token_header(value: str) -> str | None:
    parts = value.split()
    if len(parts) != 2 or parts[0] not in TOKEN_KEYWORDS:
        return None
    return parts[1]


class HashedTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token <key>` (or `Bearer <key>`) against hashed keys."""

    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        key = parse_token_header(header)
        if key is None:
            if header.split()[0] in TOKEN_KEYWORDS:
                raise exceptions.AuthenticationFailed("Invalid token header.")
            return None
        token = token_for_key(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired token.")
        return token.user, token  # request.auth is the token: streams end when it is revoked (R-FS3)

    def authenticate_header(self, request) -> str:
        return self.keyword


class PasswordBasicAuthentication(authentication.BasicAuthentication):
    """HTTP Basic with a user's password (R-UP2: upstream's management client sends it). Failed
    attempts count toward the login form's limit, per address and per username (R-FS1)."""

    www_authenticate_realm = "Skill Runner"

    def authenticate_credentials(self, userid, password, request=None):
        address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
        keys = failure_keys(address, userid)
        if too_many_failures(keys):
            raise ApplicationError(
                "RATE_LIMITED", "too many failed logins; try again in a few minutes", status_code=429
            )
        user = authenticate(request=request, username=userid, password=password)
        if user is None or not user.is_active:
            count_failure(keys)
            raise exceptions.AuthenticationFailed("Invalid username or password.")
        return user, None


class BasicChallenge:
    """For views of upstream's management and skill-package paths: their 401 names Basic beside
    Token (R-UP2), so a management client knows a password will do. Other paths name Token
    only: a browser answers a Basic challenge to a page's own request with a password prompt."""

    def get_authenticate_header(self, request) -> str:
        realm = PasswordBasicAuthentication.www_authenticate_realm
        return f'{HashedTokenAuthentication.keyword}, Basic realm="{realm}"'
