from django.urls import path

from . import api, views

urlpatterns = [
    path("v1/skills", api.SkillListView.as_view(), name="skill-list"),
    path("v1/skills/<str:skill_id>", api.SkillDetailView.as_view(), name="skill-detail"),
    path("v1/skill-packages/install", api.SkillInstallView.as_view(), name="skill-install"),
]

# Mounted by the root URLconf in the pages' `ui` namespace.
page_patterns = [
    path("skills/", views.skill_list, name="skill-list"),
]
