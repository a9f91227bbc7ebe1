"""Websocket routes and who may open them (R-UI2): API clients by token header, browsers by
session cookie from one of our own origins."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.contrib.auth.models import AnonymousUser
from django.urls import path

from accounts.authentication import parse_token_header, user_for_token_key

from .consumers import RunConsumer
from .inbox import InboxConsumer


def authorization_header(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return value.decode("latin-1")
    return None


@database_sync_to_async
def user_for_header(header: str):
    key = parse_token_header(header)
    user = user_for_token_key(key) if key else None
    return user or AnonymousUser()


class WebsocketAuthMiddleware:
    """Puts the caller in scope["user"]; an unknown caller gets AnonymousUser and the consumer closes 4401.

    A token header is never sent by a browser on its own (pages cannot set it on a websocket),
    so it needs no origin check. Cookies are, even from other sites' pages: a cookie-authenticated
    socket must come from an allowed origin, or it is refused at the handshake.
    Tokens are read from the header only, never the URL, which ends up in logs.
    """

    def __init__(self, inner):
        self.inner = inner
        self.session_auth = AuthMiddlewareStack(inner)

    async def __call__(self, scope, receive, send):
        header = authorization_header(scope)
        if header is not None:
            scope = {**scope, "user": await user_for_header(header)}
            return await self.inner(scope, receive, send)
        # Built per connection so it sees the current ALLOWED_HOSTS (tests override it).
        return await AllowedHostsOriginValidator(self.session_auth)(scope, receive, send)


websocket_application = WebsocketAuthMiddleware(
    URLRouter(
        [
            path("ws/runs/<str:request_id>/", RunConsumer.as_asgi()),
            path("ws/inbox/", InboxConsumer.as_asgi()),
        ]
    )
)
