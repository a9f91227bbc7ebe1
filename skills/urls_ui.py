"""Skill pages; skillrunner.urls_ui mounts them in the `ui` namespace."""

from django.urls import path

from . import views

urlpatterns = [
    path("skills/", views.skill_list, name="skill-list"),
]
