"""Single-user local mode (R-UP1): a request without credentials acts as the local user.

Upstream's clients (the Zotero plugin) send no credentials to a local service, so local mode
takes them as one user, `SKILLRUNNER_LOCAL_USER` — and is safe only because of what else it
insists on: settings refuse it unless agents sit behind the provider relay (they cannot reach
the service), `serve` refuses to bind anything but loopback, and every request and websocket from
a peer outside loopback is refused here. Credentials that are sent still count: a bad token is
401 as in any mode. A browser page of another site could still send requests to loopback, so a
credential-free request that a browser marks as coming from another site is refused too.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework import authentication

from kernel.middleware import error_response

API_PREFIX = "/v1/"


def is_loopback(address: str | None) -> bool:
    try:
        return ipaddress.ip_address((address or "").split("%")[0]).is_loopback
    except ValueError:
        return False


def is_loopback_host(host: str) -> bool:
    """Whether a bind address is loopback: an IP literal, or `localhost`."""
    return host == "localhost" or is_loopback(host.strip("[]"))


def local_user():
    """The local user, created staff (the one person using this service) on first need; None
    once an admin has deactivated it."""
    user, created = get_user_model().objects.get_or_create(
        username=settings.SKILLRUNNER_LOCAL_USER, defaults={"is_staff": True}
    )
    if created:
        user.set_unusable_password()  # reached by being on this machine, never by a password
        user.save(update_fields=["password"])
    return user if user.is_active else None


def _foreign_origin(headers: Any, host: str) -> bool:
    """Whether a browser says this request comes from a page of another site: an http(s) Origin
    other than this service's, or `Sec-Fetch-Site: cross-site`. Non-browser clients send neither."""
    if headers.get("Sec-Fetch-Site") == "cross-site":
        return True
    origin = headers.get("Origin")
    if not origin or origin == "null":
        return False
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc != host


class LocalModeMiddleware:
    """In local mode: refuse peers outside loopback (403 LOCAL_MODE_LOOPBACK_ONLY), and let pages
    act as the local user when nobody is logged in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not settings.SKILLRUNNER_LOCAL_MODE:
            return self.get_response(request)
        if not is_loopback(request.META.get("REMOTE_ADDR")):
            return error_response(
                403, "LOCAL_MODE_LOOPBACK_ONLY", "this service is in local mode and answers loopback only"
            )
        # The API takes the local user in LocalUserAuthentication, after any credentials sent;
        # pages take it here (forms keep their CSRF tokens, which a page of another site lacks).
        if not request.path.startswith(API_PREFIX) and not request.user.is_authenticated:
            user = local_user()
            if user is not None:
                request.user = user
        return self.get_response(request)


class LocalUserAuthentication(authentication.BaseAuthentication):
    """Last of the API's authentication classes: a request that sent no credentials at all acts
    as the local user in local mode; anything else is left to the other classes' verdicts."""

    def authenticate(self, request):
        if not settings.SKILLRUNNER_LOCAL_MODE or authentication.get_authorization_header(request):
            return None
        if _foreign_origin(request.headers, request.get_host()):
            return None  # 401: another site's page does not act as the local user
        user = local_user()
        return (user, None) if user is not None else None
