"""Admin audit of installed skills (R-UI4): read-only; skills change through install_zip only."""

from __future__ import annotations

from django.contrib import admin

from kernel.readonly_admin import ReadOnlyAdmin, ReadOnlyInline

from .models import Skill, SkillVersion


class SkillVersionInline(ReadOnlyInline):
    model = SkillVersion
    fields = ("version", "name", "effective_engines", "execution_modes", "installed_at", "installed_by")
    ordering = ("-installed_at",)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("skill", "installed_by")


@admin.register(Skill)
class SkillAdmin(ReadOnlyAdmin):
    list_display = ("skill_id", "current_version", "updated_at")
    list_select_related = ("current",)
    search_fields = ("skill_id", "current__name", "current__description")
    list_filter = ("updated_at",)
    inlines = [SkillVersionInline]

    @admin.display(description="current version", ordering="current__version")
    def current_version(self, skill: Skill) -> str:
        return skill.current.version if skill.current else "—"


@admin.register(SkillVersion)
class SkillVersionAdmin(ReadOnlyAdmin):
    list_display = ("skill", "version", "name", "installed_at", "installed_by")
    list_select_related = ("skill", "installed_by")
    list_filter = ("skill", "installed_at")
    search_fields = ("skill__skill_id", "name", "description")
    date_hierarchy = "installed_at"
