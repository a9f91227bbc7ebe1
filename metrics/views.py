"""Who may scrape, and the scrape.

A staff user's API token, or a peer address in SKILLRUNNER_METRICS_ALLOW (a Prometheus server
that sends no credentials); anyone else gets 401 (no credentials) or 403 (not staff), coded as the
API's refusals are (kernel.api_errors).
In local mode the middleware answers loopback only, as for every path, and a scrape without
credentials acts as the local user, who is staff: a local Prometheus needs no token.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from rest_framework.permissions import BasePermission
from rest_framework.views import APIView

from accounts.authentication import HashedTokenAuthentication
from accounts.local_mode import LocalUserAuthentication

from .collector import ServiceCollector

# Only the service's figures: the default registry's process and platform collectors would
# describe whichever web process answered, not the service.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(ServiceCollector())


def scrape_address_allowed(address: str | None) -> bool:
    try:
        peer = ipaddress.ip_address((address or "").split("%")[0])
    except ValueError:
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        peer = peer.ipv4_mapped  # an IPv4 peer of a dual-stack socket
    return any(peer in network for network in settings.SKILLRUNNER_METRICS_ALLOW)


class StaffOrScrapeAddress(BasePermission):
    message = "metrics are for staff tokens and the scrape addresses of SKILLRUNNER_METRICS_ALLOW"

    def has_permission(self, request, view) -> bool:
        user = request.user
        return scrape_address_allowed(request.META.get("REMOTE_ADDR")) or bool(user and user.is_staff)


class MetricsView(APIView):
    authentication_classes = [HashedTokenAuthentication, LocalUserAuthentication]
    permission_classes = [StaffOrScrapeAddress]

    @extend_schema(exclude=True)  # Prometheus' format, not the API's JSON
    def get(self, request) -> HttpResponse:
        return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
