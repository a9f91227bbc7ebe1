"""Where webhooks may go (R-NT2): public addresses only, checked after DNS resolution.

A destination is checked when it is registered and again at every delivery, and the delivery
then connects to exactly the address that was checked, so a DNS answer that changes between
the check and the connection (rebinding) cannot send it inside.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from kernel.errors import ApplicationError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class DestinationError(ApplicationError):
    pass


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent in the request line
    address: str  # the checked IP to connect to


def _refused(address: IPAddress) -> bool:
    """Anything but a globally routable unicast address: loopback, RFC 1918, link-local (cloud
    metadata at 169.254.169.254 included), shared, reserved, multicast, and their IPv6 forms."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None and _refused(embedded):
            return True
    return not address.is_global or address.is_multicast


def parse(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise DestinationError("WEBHOOK_URL_INVALID", f"not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DestinationError("WEBHOOK_URL_INVALID", "the URL must be http:// or https:// with a host name")
    if parts.username or parts.password:
        raise DestinationError("WEBHOOK_URL_INVALID", "credentials in the URL are not supported")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), target


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address the name resolves to (the boundary tests replace to fake DNS answers)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise DestinationError("WEBHOOK_URL_UNRESOLVABLE", f"cannot resolve {host!r}: {exc}") from exc
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def check(url: str) -> Destination:
    """The destination of `url` with an address that may be connected to, or a coded refusal.

    A name is refused if ANY of its addresses is: otherwise a name with one public and one
    private answer would be let in and the connection could be steered to the private one.
    """
    scheme, host, port, target = parse(url)
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        addresses = resolve(host, port)
    if not addresses:
        raise DestinationError("WEBHOOK_URL_UNRESOLVABLE", f"{host!r} has no address")
    if not settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE:
        refused = [str(address) for address in addresses if _refused(address)]
        if refused:
            raise DestinationError(
                "WEBHOOK_URL_FORBIDDEN",
                f"{host!r} resolves to a non-public address ({', '.join(refused)}); webhooks go to public hosts only",
            )
    return Destination(scheme, host, port, target, str(addresses[0]))
