"""Upstream's management reads (R-UP10): the skills with their schemas, the service's runtime
defaults and the engines, in the shapes of upstream's `docs/api_reference.md` (§0 Management).
Its example client builds its home page and run forms from them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import BasicChallenge
from enginehost.config import PROBE_HOME, detected_versions, engine_config
from engines.registry import ENGINE_NAMES, get_adapter
from kernel.errors import NotFound
from runs import runfiles
from skills.models import SkillVersion
from skills.selectors import installed_skill, installed_skills

from .files import tree_entries

SCHEMA_KEYS = ("input", "parameter", "output")


class SkillSummary(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    version = serializers.CharField()
    engines = serializers.ListField(child=serializers.CharField())
    unsupported_engines = serializers.ListField(child=serializers.CharField())
    effective_engines = serializers.ListField(child=serializers.CharField())
    execution_modes = serializers.ListField(child=serializers.CharField())
    is_builtin = serializers.BooleanField(help_text="installed by the service itself, not by a user")
    installed_at = serializers.DateTimeField()
    health = serializers.CharField(help_text='"healthy": only valid packages are ever installed here')
    health_error = serializers.CharField(allow_null=True)


class FileEntry(serializers.Serializer):
    path = serializers.CharField()
    name = serializers.CharField()
    is_dir = serializers.BooleanField()
    depth = serializers.IntegerField()


class SkillDetail(SkillSummary):
    runtime = serializers.JSONField(help_text="{default_options}")
    schemas = serializers.DictField(child=serializers.CharField(), help_text="each schema's file in the package")
    entrypoints = serializers.JSONField(help_text="runner.json `entrypoint`")
    files = FileEntry(many=True)


def skill_summary(version: SkillVersion) -> dict[str, Any]:
    return {
        "id": version.skill.skill_id,
        "name": version.name,
        "description": version.description or None,
        "version": version.version,
        "engines": version.engines,
        "unsupported_engines": version.unsupported_engines,
        "effective_engines": version.effective_engines,
        "execution_modes": version.execution_modes,
        "is_builtin": version.installed_by_id is None,
        "installed_at": version.installed_at,
        "health": "healthy",
        "health_error": None,
    }


def skill_detail(version: SkillVersion) -> dict[str, Any]:
    manifest = version.manifest
    declared = manifest.get("schemas") if isinstance(manifest.get("schemas"), dict) else {}
    runtime = manifest.get("runtime") if isinstance(manifest.get("runtime"), dict) else {}
    entrypoint = manifest.get("entrypoint")
    return {
        **skill_summary(version),
        "runtime": {"default_options": runtime.get("default_options") or {}},
        "schemas": {key: str(declared.get(key) or f"assets/{key}.schema.json") for key in SCHEMA_KEYS},
        "entrypoints": entrypoint if isinstance(entrypoint, dict) else {},
        "files": tree_entries(runfiles.list_files(version.path)),
    }


def _installed(skill_id: str) -> SkillVersion:
    skill = installed_skill(skill_id)
    if skill is None or skill.current is None:
        raise NotFound("SKILL_NOT_FOUND", f"no installed skill {skill_id!r}")
    return skill.current


class ManagementSkillsView(BasicChallenge, APIView):
    @extend_schema(responses=inline_serializer("ManagementSkills", {"skills": SkillSummary(many=True)}))
    def get(self, request):
        summaries = [skill_summary(skill.current) for skill in installed_skills() if skill.current is not None]
        return Response({"skills": SkillSummary(summaries, many=True).data})


class ManagementSkillView(BasicChallenge, APIView):
    @extend_schema(responses=SkillDetail)
    def get(self, request, skill_id):
        return Response(SkillDetail(skill_detail(_installed(skill_id))).data)


class ManagementSkillSchemasView(BasicChallenge, APIView):
    @extend_schema(
        responses=inline_serializer(
            "ManagementSkillSchemas",
            {"skill_id": serializers.CharField(), **{key: serializers.JSONField() for key in SCHEMA_KEYS}},
        )
    )
    def get(self, request, skill_id):
        version = _installed(skill_id)
        return Response({"skill_id": version.skill.skill_id, **{key: version.schemas[key] for key in SCHEMA_KEYS}})


class ManagementRuntimeOptionsView(BasicChallenge, APIView):
    @extend_schema(
        responses=inline_serializer(
            "ManagementRuntimeOptions",
            {
                "service_defaults": inline_serializer(
                    "ManagementServiceDefaults", {"hard_timeout_seconds": serializers.IntegerField()}
                )
            },
        )
    )
    def get(self, request):
        return Response({"service_defaults": {"hard_timeout_seconds": settings.SKILLRUNNER_DEFAULT_HARD_TIMEOUT}})


class EngineSummary(serializers.Serializer):
    engine = serializers.CharField()
    cli_version = serializers.CharField(allow_null=True)
    models_count = serializers.IntegerField()


class EngineDetail(EngineSummary):
    models = serializers.ListField(child=serializers.DictField(), help_text="as GET /v1/engines/{engine}/models")
    upgrade_status = serializers.DictField(help_text="always empty: engines are upgraded with the service")
    last_error = serializers.CharField(allow_null=True)
    credential_statuses = serializers.ListField(
        child=serializers.DictField(), help_text="always empty: the operator configures engine credentials"
    )


def _engine(name: str, version: str | None) -> dict[str, Any]:
    models = get_adapter(name).models(engine_config(name, PROBE_HOME))
    return {"engine": name, "cli_version": version, "models_count": len(models), "models": models}


class ManagementEnginesView(BasicChallenge, APIView):
    @extend_schema(responses=inline_serializer("ManagementEngines", {"engines": EngineSummary(many=True)}))
    def get(self, request):
        versions = detected_versions(ENGINE_NAMES)
        engines = [_engine(name, versions[name]) for name in ENGINE_NAMES]
        return Response({"engines": EngineSummary(engines, many=True).data})


class ManagementEngineView(BasicChallenge, APIView):
    @extend_schema(responses=EngineDetail)
    def get(self, request, engine):
        if engine not in ENGINE_NAMES:
            raise NotFound("ENGINE_NOT_FOUND", f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
        detail = {
            **_engine(engine, detected_versions([engine])[engine]),
            "upgrade_status": {},
            "last_error": None,
            "credential_statuses": [],
        }
        return Response(EngineDetail(detail).data)
