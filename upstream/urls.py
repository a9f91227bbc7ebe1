"""Paths of upstream's contract (SPEC §16): those the service's own API does not have, and those
both share (`/events`, `/events/history`, a run's status and its reply), whose views answer in
either form or add upstream's fields (SPEC R-UP5, R-UP10)."""

from __future__ import annotations

from django.urls import path

from . import api, files, management

job = "v1/jobs/<str:request_id>"

urlpatterns = [
    path(job, api.JobDetailView.as_view(), name="job-detail"),
    path(f"{job}/interaction/reply", api.ReplyView.as_view(), name="job-reply"),
    path(f"{job}/events/history", api.EventHistoryView.as_view(), name="job-events-history"),
    path(f"{job}/events", api.EventStreamView.as_view(), name="job-events"),
    path("v1/system/handshake", api.HandshakeView.as_view(), name="handshake"),
    path("v1/management/runs", api.ManagementRunsView.as_view(), name="management-runs"),
    path("v1/management/skills", management.ManagementSkillsView.as_view(), name="management-skills"),
    path("v1/management/skills/<str:skill_id>", management.ManagementSkillView.as_view(), name="management-skill"),
    path(
        "v1/management/skills/<str:skill_id>/schemas",
        management.ManagementSkillSchemasView.as_view(),
        name="management-skill-schemas",
    ),
    path(
        "v1/management/runtime-options",
        management.ManagementRuntimeOptionsView.as_view(),
        name="management-runtime-options",
    ),
    path("v1/management/engines", management.ManagementEnginesView.as_view(), name="management-engines"),
    path("v1/management/engines/<str:engine>", management.ManagementEngineView.as_view(), name="management-engine"),
    path(f"{job}/files", files.RunFilesView.as_view(), name="job-files"),
    path(f"{job}/file", files.RunFileView.as_view(), name="job-file"),
    path(f"{job}/logs/range", files.LogRangeView.as_view(), name="job-log-range"),
    path(f"{job}/bundle/debug", files.DebugBundleView.as_view(), name="job-bundle-debug"),
    path(f"{job}/auth/session", api.AuthSessionView.as_view(), name="job-auth-session"),
    path(f"{job}/interaction/auth/import", api.AuthImportView.as_view(), name="job-auth-import"),
    path(f"{job}/chat/history", api.ChatHistoryView.as_view(), name="job-chat-history"),
    path(f"{job}/chat", api.ChatStreamView.as_view(), name="job-chat"),
    path(f"{job}/interaction/reply/files", api.ReplyFilesView.as_view(), name="job-reply-files"),
    path("ui", api.ui, name="upstream-ui"),
    path("ui/", api.ui),
]
