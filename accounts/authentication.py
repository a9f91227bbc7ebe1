from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from .models import ApiToken

LAST_USED_RESOLUTION_SECONDS = 60


def token_for_key(key: str) -> ApiToken | None:
    """The active token of an active user this API key is, or None; shared by the REST API and the websocket."""
    token = ApiToken.objects.for_key(key)
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > LAST_USED_RESOLUTION_SECONDS:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def parse_token_header(value: str) -> str | None:
    parts = value.split()
    if len(parts) != 2 or parts[0] != HashedTokenAuthentication.keyword:
        return None
    return parts[1]


class HashedTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token <key>` against hashed keys."""

    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        key = parse_token_header(header)
        if key is None:
            if header.split()[:1] == [self.keyword]:
                raise exceptions.AuthenticationFailed("Invalid token header.")
            return None
        token = token_for_key(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        return token.user, token  # request.auth is the token: streams end when it is revoked (R-FS3)

    def authenticate_header(self, request) -> str:
        return self.keyword
