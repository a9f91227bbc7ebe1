"""Websocket routes and who may open them (R-UI2): API clients by token header, browsers by
session cookie from one of our own origins."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import split_domain_port, validate_host
from django.urls import path

from accounts.authentication import parse_token_header, token_for_key
from accounts.local_mode import is_loopback, local_user

from .consumers import RunConsumer
from .inbox import InboxConsumer


def header(scope: dict[str, Any], wanted: bytes) -> str | None:
    for name, value in scope.get("headers", []):
        if name == wanted:
            return value.decode("latin-1")
    return None


def authorization_header(scope: dict[str, Any]) -> str | None:
    return header(scope, b"authorization")


DEFAULT_PORTS = {"http": "80", "https": "443"}


def _normal_origin(scheme: str, host: str) -> str:
    domain, port = split_domain_port(host)
    return f"{scheme}://{domain}:{port or DEFAULT_PORTS.get(scheme, '')}" if domain else ""


def _page_scheme(scope: dict[str, Any]) -> str:
    """The scheme of the page that may open this socket: https behind a TLS-terminating proxy
    that says so in the header SECURE_PROXY_SSL_HEADER names, else the socket's own."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name, secure_value = proxy
        sent = header(scope, name.removeprefix("HTTP_").replace("_", "-").lower().encode())
        if sent is not None:
            return "https" if sent.split(",")[0].strip() == secure_value else "http"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def same_origin(scope: dict[str, Any]) -> bool:
    """R-FS3: a cookie-authenticated socket comes from exactly this site (scheme, host and port
    of the request, host allowed), or from an origin listed in CSRF_TRUSTED_ORIGINS."""
    origin, host = header(scope, b"origin"), header(scope, b"host")
    if not origin or not host:
        return False
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    scheme, _, origin_host = origin.partition("://")
    if _normal_origin(scheme.lower(), origin_host) == _normal_origin(_page_scheme(scope), host):
        return True
    return origin in settings.CSRF_TRUSTED_ORIGINS


@database_sync_to_async
def token_for_header(header: str):
    key = parse_token_header(header)
    return token_for_key(key) if key else None


class WebsocketAuthMiddleware:
    """Puts the caller in scope["user"] (and their token in scope["api_token"]); an unknown caller
    gets AnonymousUser and the consumer closes 4401.

    A token header is never sent by a browser on its own (pages cannot set it on a websocket),
    so it needs no origin check. Cookies are, even from other sites' pages: a cookie-authenticated
    socket must come from this site's exact origin, or it is refused at the handshake.
    Tokens are read from the header only, never the URL, which ends up in logs.
    """

    def __init__(self, inner):
        self.inner = inner
        self.session_auth = AuthMiddlewareStack(inner)

    async def __call__(self, scope, receive, send):
        header = authorization_header(scope)
        if header is not None:
            token = await token_for_header(header)
            scope = {**scope, "user": token.user if token else AnonymousUser(), "api_token": token}
            return await self.inner(scope, receive, send)
        if not same_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.session_auth(scope, receive, send)


@database_sync_to_async
def _local_user():
    return local_user()


class LocalModeWebsocketMiddleware:
    """R-UP1 for websockets: in local mode only loopback peers connect."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if settings.SKILLRUNNER_LOCAL_MODE and not is_loopback((scope.get("client") or [None])[0]):
            return await WebsocketDenier()(scope, receive, send)
        return await self.inner(scope, receive, send)


class LocalUserWebsocketMiddleware:
    """In local mode a page nobody is logged in to acts as the local user (its origin was checked
    like any cookie socket's); a socket that sent a token is left to its verdict."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        if settings.SKILLRUNNER_LOCAL_MODE and "api_token" not in scope and not (user and user.is_authenticated):
            scope = {**scope, "user": await _local_user() or AnonymousUser()}
        return await self.inner(scope, receive, send)


websocket_application = LocalModeWebsocketMiddleware(
    WebsocketAuthMiddleware(
        LocalUserWebsocketMiddleware(
            URLRouter(
                [
                    path("ws/runs/<str:request_id>/", RunConsumer.as_asgi()),
                    path("ws/inbox/", InboxConsumer.as_asgi()),
                ]
            )
        )
    )
)
