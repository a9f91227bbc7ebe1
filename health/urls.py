"""The probes: `/healthz` and `/readyz` for orchestrators, and their `/v1/system/` forms for clients."""

from django.urls import path

from . import views

urlpatterns = [
    path("v1/system/ping", views.ping, name="ping"),
    path("v1/system/healthz", views.healthz),
    path("v1/system/readyz", views.readyz),
    path("healthz", views.healthz),
    path("readyz", views.readyz),
]
