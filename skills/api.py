"""GET /v1/skills… and POST /v1/skill-packages/install."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from accounts.authentication import BasicChallenge
from kernel.errors import ApplicationError, NotFound
from kernel.throttles import SKILL_INSTALL_SCOPE

from .selectors import installed_skill, installed_skills
from .services import install_zip


class SkillOutput(serializers.Serializer):
    id = serializers.CharField(source="skill.skill_id")
    name = serializers.CharField()
    version = serializers.CharField()
    description = serializers.CharField()
    engines = serializers.ListField(child=serializers.CharField())
    unsupported_engines = serializers.ListField(child=serializers.CharField())
    effective_engines = serializers.ListField(child=serializers.CharField())
    execution_modes = serializers.ListField(child=serializers.CharField())
    max_attempt = serializers.IntegerField(allow_null=True)
    artifacts = serializers.JSONField()
    schemas = serializers.JSONField()
    runtime = serializers.JSONField(source="manifest.runtime", default=None)
    installed_at = serializers.DateTimeField()


class SkillListView(APIView):
    @extend_schema(responses=SkillOutput(many=True))
    def get(self, request):
        return Response(SkillOutput([skill.current for skill in installed_skills()], many=True).data)


class SkillDetailView(APIView):
    @extend_schema(responses=SkillOutput)
    def get(self, request, skill_id):
        skill = installed_skill(skill_id)
        if skill is None:
            raise NotFound("SKILL_NOT_FOUND", f"no installed skill {skill_id!r}")
        return Response(SkillOutput(skill.current).data)


class SkillInstallView(BasicChallenge, APIView):
    permission_classes = [IsAdminUser]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = SKILL_INSTALL_SCOPE  # shared with the skills page's form (R-FS1)
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        request={"multipart/form-data": inline_serializer("SkillPackageUpload", {"file": serializers.FileField()})},
        responses=inline_serializer(
            "SkillInstalled",
            {
                "skill_id": serializers.CharField(),
                "version": serializers.CharField(),
                "status": serializers.CharField(),
            },
        ),
    )
    def post(self, request):
        upload = request.FILES.get("file")
        if upload is None:
            raise ApplicationError("UPLOAD_FILE_MISSING", "send the skill zip as multipart field `file`")
        version = install_zip(upload, user=request.user)
        return Response({"skill_id": version.skill.skill_id, "version": version.version, "status": "installed"})
