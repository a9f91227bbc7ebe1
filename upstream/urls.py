"""Paths of upstream's contract that the service's own API does not have (SPEC §16)."""

from __future__ import annotations

from django.urls import path

from . import api

urlpatterns = [
    path("v1/system/handshake", api.HandshakeView.as_view(), name="handshake"),
    path("v1/management/runs", api.ManagementRunsView.as_view(), name="management-runs"),
    path("ui", api.ui, name="upstream-ui"),
    path("ui/", api.ui),
]
