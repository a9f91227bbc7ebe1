"""Reads of installed skills: what the API, the pages and run admission see as installed."""

from __future__ import annotations

from django.db.models import QuerySet

from kernel.compiled import one_or_none

from .models import Skill, SkillVersion


def installed_skills() -> QuerySet[Skill]:
    return Skill.objects.filter(current__isnull=False).select_related("current")


def installed_skill(skill_id: str) -> Skill | None:
    if "\x00" in skill_id:  # never a valid id, and PostgreSQL refuses to even compare it
        return None
    return one_or_none(installed_skills().filter(skill_id=skill_id))


def current_version(skill_id: str) -> SkillVersion | None:
    skill = installed_skill(skill_id)
    return skill.current if skill else None
