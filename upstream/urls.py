"""Paths of upstream's contract that the service's own API does not have (SPEC §16)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
