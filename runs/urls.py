"""The jobs API that is the service's own, and the run pages. A run's status, its reply and its
event streams answer in upstream's form too: upstream.urls routes them."""

from django.urls import path, register_converter

from kernel.converters import AnyPathConverter

from . import api, views

register_converter(AnyPathConverter, "anypath")

job = "v1/jobs/<str:request_id>"

urlpatterns = [
    path("v1/jobs", api.JobListCreateView.as_view(), name="job-list"),
    path(f"{job}/upload", api.JobUploadView.as_view(), name="job-upload"),
    path(f"{job}/interaction/pending", api.PendingInteractionView.as_view(), name="job-pending"),
    path(f"{job}/interaction/history", api.InteractionHistoryView.as_view(), name="job-history"),
    path(f"{job}/cancel", api.CancelView.as_view(), name="job-cancel"),
    path(f"{job}/result", api.ResultView.as_view(), name="job-result"),
    path(f"{job}/artifacts", api.ArtifactListView.as_view(), name="job-artifacts"),
    path(f"{job}/artifacts/<anypath:path>", api.ArtifactFileView.as_view(), name="job-artifact"),
    path(f"{job}/bundle", api.BundleView.as_view(), name="job-bundle"),
    path(f"{job}/logs", api.LogsView.as_view(), name="job-logs"),
    path("v1/usage", api.UsageView.as_view(), name="usage"),
]

# Mounted by the root URLconf in the pages' `ui` namespace.
page_patterns = [
    path("", views.run_list, name="run-list"),
    path("runs/new/", views.choose_skill, name="choose-skill"),
    path("runs/new/<str:skill_id>/", views.new_run, name="run-new"),
    path("runs/<str:request_id>/", views.run_detail, name="run-detail"),
    path("runs/<str:request_id>/rerun/", views.rerun, name="run-rerun"),
    path("runs/<str:request_id>/cancel/", views.cancel, name="run-cancel"),
    path("inbox/", views.inbox_page, name="inbox"),
    path("runs/<str:request_id>/preview/<anypath:path>", views.artifact_preview, name="artifact-preview"),
    path("runs/<str:request_id>/files/<anypath:path>", views.artifact_page, name="artifact"),
]
