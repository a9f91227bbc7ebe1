"""Paths of upstream's contract that the service's own API does not have (SPEC §16). The two
paths both share (`/events`, `/events/history`) are routed in skillrunner.urls to upstream.api's
views, which answer in either form."""

from __future__ import annotations

from django.urls import path

from . import api

job = "v1/jobs/<str:request_id>"

urlpatterns = [
    path("v1/system/handshake", api.HandshakeView.as_view(), name="handshake"),
    path("v1/management/runs", api.ManagementRunsView.as_view(), name="management-runs"),
    path(f"{job}/chat/history", api.ChatHistoryView.as_view(), name="job-chat-history"),
    path(f"{job}/chat", api.ChatStreamView.as_view(), name="job-chat"),
    path(f"{job}/interaction/reply/files", api.ReplyFilesView.as_view(), name="job-reply-files"),
    path("ui", api.ui, name="upstream-ui"),
    path("ui/", api.ui),
]
