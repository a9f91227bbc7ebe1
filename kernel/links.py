"""Links to the site's pages from outside a request: question emails, webhook payloads.

They start with SKILLRUNNER_PUBLIC_URL, the site's address as its users reach it. When it is not
set, `manage.py serve` sets it to the address it listens on before it starts web and worker, so
the links follow `--port`; processes started some other way fall back to `make run`'s default.
"""

from __future__ import annotations

import ipaddress
import socket

from django.conf import settings
from django.urls import reverse

FALLBACK_PUBLIC_URL = "http://127.0.0.1:8000"


def public_url(path: str) -> str:
    """The absolute address of `path` (a path on this site, as reverse() gives it)."""
    return (settings.SKILLRUNNER_PUBLIC_URL or FALLBACK_PUBLIC_URL) + path


def run_page_url(request_id) -> str:
    return public_url(reverse("ui:run-detail", args=[request_id]))


def served_url(host: str, port: int) -> str:
    """The address a browser on this machine or network uses for a server bound to host:port:
    an IPv6 literal in brackets; a wildcard bind by this machine's name."""
    name = host.strip("[]")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return f"http://{name}:{port}"
    if address.is_unspecified:
        return f"http://{socket.gethostname()}:{port}"
    return f"http://[{name}]:{port}" if address.version == 6 else f"http://{name}:{port}"


def use_served_url(host: str, port: int) -> None:
    """For `manage.py serve`: links point at where it listens, unless the operator said otherwise."""
    if not settings.SKILLRUNNER_PUBLIC_URL:
        settings.SKILLRUNNER_PUBLIC_URL = served_url(host, port)
