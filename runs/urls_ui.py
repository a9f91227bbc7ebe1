"""Run pages; skillrunner.urls_ui mounts them in the `ui` namespace."""

from django.urls import path

from . import views

urlpatterns = [
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
