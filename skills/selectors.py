from __future__ import annotations

from django.db.models import QuerySet

from .models import Skill, SkillVersion


def installed_skills() -> QuerySet[Skill]:
    return Skill.objects.filter(current__isnull=False).select_related("current")


def current_version(skill_id: str) -> SkillVersion | None:
    skill = installed_skills().filter(skill_id=skill_id).first()
    return skill.current if skill else None
