"""POST /v1/system/handshake (R-UP3): which of upstream's protocols this service speaks.

Upstream's client sends `{schema, client: {name, version}, requested_protocols: [...]}` before
its first job and falls back to its "legacy" assumptions on a 404; a 401 or 403 would stop it,
so the handshake never needs credentials.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from kernel.errors import ApplicationError
from runs.services import reply_file_limits

REQUEST_SCHEMA = "zotero-agents.skillrunner-handshake.request.v1"
RESPONSE_SCHEMA = "zotero-agents.skillrunner-handshake.response.v1"
JOB_PROTOCOL = "skillrunner.job.v1"
INTERACTION_FILES_PROTOCOL = "skillrunner.interaction-files.v1"
MAX_REQUESTED_PROTOCOLS = 64
BACKEND_NAME = "Skill Runner (Django)"


def _requested_protocols(body: Any) -> list[str]:
    if not isinstance(body, dict):
        raise ApplicationError("HANDSHAKE_INVALID", "the handshake body must be a JSON object")
    if body.get("schema") != REQUEST_SCHEMA:
        raise ApplicationError(
            "HANDSHAKE_SCHEMA_UNSUPPORTED", f"schema must be {REQUEST_SCHEMA!r}", supported_schema=REQUEST_SCHEMA
        )
    requested = body.get("requested_protocols", [])
    if (
        not isinstance(requested, list)
        or len(requested) > MAX_REQUESTED_PROTOCOLS
        or not all(isinstance(item, str) and 0 < len(item) <= 128 for item in requested)
    ):
        raise ApplicationError(
            "HANDSHAKE_INVALID",
            f"requested_protocols must be a list of at most {MAX_REQUESTED_PROTOCOLS} protocol ids (strings)",
        )
    client = body.get("client", {})
    if not isinstance(client, dict):
        raise ApplicationError("HANDSHAKE_INVALID", "client must be an object {name, version}")
    return requested


def handshake(body: Any) -> dict[str, Any]:
    """The answer to a handshake request: the job protocol always, file replies with their limits
    when asked for, any other protocol asked for as unsupported."""
    protocols: dict[str, dict[str, Any]] = {JOB_PROTOCOL: {"supported": True}}
    for protocol in _requested_protocols(body):
        if protocol == INTERACTION_FILES_PROTOCOL:
            protocols[protocol] = {"supported": True, **reply_file_limits()}
        else:
            protocols.setdefault(protocol, {"supported": False})
    return {
        "schema": RESPONSE_SCHEMA,
        "backend": {"name": BACKEND_NAME, "version": version("skillrunner")},
        "protocols": protocols,
    }
