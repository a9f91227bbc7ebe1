"""The engine catalogue (GET /v1/engines, GET /v1/engines/<engine>/models), beside the engine
settings it reports on."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from engines.registry import ENGINE_NAMES, get_adapter
from kernel.errors import NotFound

from .config import PROBE_HOME, detected_versions, engine_config, sandbox_status


def _engine_entry(name: str, version: str | None, sandbox: dict, *, staff: bool) -> dict:
    adapter = get_adapter(name)
    config = engine_config(name, PROBE_HOME)
    entry = {
        "engine": name,
        "cli_version_detected": version,
        "available": version is not None and sandbox["available"],
        "interactive_profile": adapter.interactive_profile,
        "default_model": config.default_model,
    }
    if staff:  # where the service keeps its tools is the operator's business (R-FS3)
        entry["binary"] = config.binary
    return entry


class EngineListView(APIView):
    @extend_schema(responses=dict)
    def get(self, request):
        staff = request.user.is_staff
        sandbox = sandbox_status()  # R-SB6: an engine without a working sandbox is not available
        versions = detected_versions(ENGINE_NAMES)
        engines = [_engine_entry(name, versions[name], sandbox, staff=staff) for name in ENGINE_NAMES]
        return Response({"engines": engines, "sandbox": sandbox})


class EngineModelsView(APIView):
    @extend_schema(responses=dict)
    def get(self, request, engine):
        if engine not in ENGINE_NAMES:
            raise NotFound("ENGINE_NOT_FOUND", f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
        adapter = get_adapter(engine)
        config = engine_config(engine, PROBE_HOME)
        return Response(
            {"engine": engine, "cli_version_detected": adapter.detect_version(config), "models": adapter.models(config)}
        )
