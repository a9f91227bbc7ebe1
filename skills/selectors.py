"""Reads of installed skills: what the API, the pages and run admission see as installed."""

from __future__ import annotations

from django.db.models import QuerySet

from kernel.compiled import PreparedQuery

from .models import Skill, SkillVersion


def installed_skills() -> QuerySet[Skill]:
    return Skill.objects.filter(current__isnull=False).select_related("current")


# Each run's creation reads its skill: compiled once per process (kernel.compiled).
_INSTALLED = PreparedQuery(
    lambda skill_id: installed_skills().filter(skill_id=skill_id)[:1], Skill._meta.get_field("skill_id")
)


def installed_skill(skill_id: str) -> Skill | None:
    if "\x00" in skill_id:  # never a valid id, and PostgreSQL refuses to even compare it
        return None
    skill: Skill | None = _INSTALLED.one(skill_id)
    return skill


def current_version(skill_id: str) -> SkillVersion | None:
    skill = installed_skill(skill_id)
    return skill.current if skill else None
