"""Installed skills: a skill id and the immutable versions installed under it, each a snapshot
of the package (manifest, schemas, files) that runs of that version use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models

from .packages import runtime_dependencies


class Skill(models.Model):
    """An installed skill; `current` is the version new runs use.

    A temporary skill (R-UP4) came with one run's upload: its one version serves that run only,
    it has no `current` (so it is never listed or run by id), and its skill id may repeat an
    installed one's."""

    skill_id = models.CharField(max_length=128)
    current = models.OneToOneField("SkillVersion", null=True, on_delete=models.PROTECT, related_name="+")
    temporary = models.BooleanField(default=False, help_text="uploaded with one run, for that run only")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["skill_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["skill_id"], condition=models.Q(temporary=False), name="unique_installed_skill_id"
            )
        ]

    def __str__(self) -> str:
        return self.skill_id


class SkillVersion(models.Model):
    """An immutable snapshot of one version of a skill package (R-SK6)."""

    skill = models.ForeignKey(Skill, on_delete=models.PROTECT, related_name="versions")
    version = models.CharField(max_length=64)
    name = models.CharField(max_length=256)
    description = models.TextField(blank=True)
    manifest = models.JSONField(help_text="runner.json as installed")
    schemas = models.JSONField(help_text="{input, parameter, output} JSON Schemas")
    # PostgreSQL's jsonb keeps no key order, so the order the author gave the input and parameter
    # properties (the run form's field order) is kept as lists.
    property_order = models.JSONField(
        default=dict, help_text="{input, parameter}: property names in the package's order"
    )
    engines = models.JSONField(default=list)
    unsupported_engines = models.JSONField(default=list)
    effective_engines = models.JSONField(default=list)
    execution_modes = models.JSONField(default=list)
    max_attempt = models.PositiveIntegerField(null=True, blank=True)
    artifacts = models.JSONField(default=list, help_text="[{role, filename, required}]")
    warnings = models.JSONField(default=list)
    snapshot_dir = models.CharField(max_length=1024)
    package_sha256 = models.CharField(max_length=64)
    installed_at = models.DateTimeField(auto_now_add=True)

    def properties(self, section: str) -> list[tuple[str, Any]]:
        """The (name, schema) pairs of the section's schema, in the package's order."""
        properties = (self.schemas.get(section) or {}).get("properties") or {}
        order = [name for name in self.property_order.get(section, []) if name in properties]
        return [(name, properties[name]) for name in [*order, *(n for n in properties if n not in order)]]

    installed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["skill__skill_id", "-installed_at"]
        constraints = [models.UniqueConstraint(fields=["skill", "version"], name="unique_skill_version")]

    def __str__(self) -> str:
        return f"{self.skill.skill_id} {self.version}"

    @property
    def path(self) -> Path:
        return Path(self.snapshot_dir)

    @property
    def dependencies(self) -> list[str]:
        """`runtime.dependencies` (R-SK7), validated at install."""
        return runtime_dependencies(self.manifest)

    @property
    def runtime_defaults(self) -> dict[str, Any]:
        runtime = self.manifest.get("runtime") or {}
        defaults = runtime.get("default_options") if isinstance(runtime, dict) else None
        return defaults if isinstance(defaults, dict) else {}
