"""Browser pages, mounted at the site root under the namespace `ui`."""

from django.urls import path

from . import views

app_name = "ui"

urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("runs/new/", views.choose_skill, name="choose-skill"),
    path("runs/new/<str:skill_id>/", views.new_run, name="run-new"),
    path("runs/<str:request_id>/", views.run_detail, name="run-detail"),
    path("skills/", views.skill_list, name="skill-list"),
]
