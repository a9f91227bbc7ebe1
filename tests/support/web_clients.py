"""The browser-facing side without a browser: runs in known states, sessions, and run sockets driven in-process."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

QUESTION = "Where do you want to go?"
PLAN = {"destination": "Oslo", "days": [{"day": 1, "activities": ["Fjord walk"]}], "plan_file": "artifacts/plan.md"}


def run_async(scenario: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body from a sync test (the suite has no asyncio plugin)."""
    return async_to_sync(scenario)()


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


def token_headers(api_client) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Token {api_client.token_key}".encode())]


def browser_headers(user, origin: str = "http://localhost", host: str = "localhost") -> list[tuple[bytes, bytes]]:
    return [(b"cookie", session_cookie(user)), (b"origin", origin.encode()), (b"host", host.encode())]


# A browser's handshake from the site itself, without a session.
SAME_SITE = [(b"origin", b"http://localhost"), (b"host", b"localhost")]


def run_socket(
    request_id: str, headers: list[tuple[bytes, bytes]], after_seq: int | None = None
) -> WebsocketCommunicator:
    from skillrunner.asgi import application

    query = f"?after_seq={after_seq}" if after_seq is not None else ""
    return WebsocketCommunicator(application, f"/ws/runs/{request_id}/{query}", headers=headers)


async def receive_until_closed(socket: WebsocketCommunicator, timeout: float = 5) -> tuple[list[dict], int | None]:
    """Every message the server sends until it closes the socket, and the close code."""
    messages = []
    while True:
        output = await socket.receive_output(timeout)
        if output["type"] == "websocket.close":
            return messages, output.get("code")
        messages.append(json.loads(output["text"]))


async def receive_messages(socket: WebsocketCommunicator, count: int, timeout: float = 5) -> list[dict]:
    return [await socket.receive_json_from(timeout) for _ in range(count)]


@pytest.fixture
def trip_run(api, install_skill, fake_codex) -> Callable[..., str]:
    """Start an interactive trip-planner run that asks one question and finishes after the reply."""

    install_skill("trip-planner")

    def start(client=None) -> str:
        fake_codex.script(
            {"message": QUESTION},
            {"message": json.dumps({**PLAN, "__SKILL_DONE__": True}), "files": {"artifacts/plan.md": "# Oslo\n"}},
        )
        response = (client or api).post(
            "/v1/jobs",
            {
                "skill_id": "trip-planner",
                "engine": "codex",
                "input": {},
                "runtime_options": {"execution_mode": "interactive"},
            },
            format="json",
        )
        assert response.status_code == 200, response.content
        return response.json()["request_id"]

    return start


def write_skill(
    root, skill_id: str, *, input_schema: dict, parameter_schema: dict, modes=("auto",), engines=None, version="1.0.0"
):
    """A minimal skill folder with the given schemas, for form and install tests."""
    folder = root / skill_id
    (folder / "assets").mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {skill_id}\ndescription: A test skill.\n---\n\nDo the thing.\n")
    manifest = {
        "id": skill_id,
        "version": version,
        "name": skill_id.replace("-", " ").title(),
        "description": "A test skill.",
        "execution_modes": list(modes),
        "schemas": {
            "input": "assets/input.schema.json",
            "parameter": "assets/parameter.schema.json",
            "output": "assets/output.schema.json",
        },
    }
    if engines:
        manifest["engines"] = list(engines)
    (folder / "assets" / "runner.json").write_text(json.dumps(manifest))
    (folder / "assets" / "input.schema.json").write_text(json.dumps({"type": "object", **input_schema}))
    (folder / "assets" / "parameter.schema.json").write_text(json.dumps({"type": "object", **parameter_schema}))
    (folder / "assets" / "output.schema.json").write_text(
        json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}})
    )
    return folder


SHOWCASE_INPUT = {
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 20, "description": "Lower-case letters only."},
        "count": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
        "ratio": {"type": "number", "title": "Mixing ratio"},
        "size": {"enum": [1, 2, 3]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "count"],
    "additionalProperties": False,
}
SHOWCASE_PARAMETER = {
    "properties": {
        "loud": {"type": "boolean"},
        "style": {"type": "string", "enum": ["plain", "fancy"], "default": "plain"},
    },
    "additionalProperties": False,
}


@pytest.fixture
def showcase_skill(install_skill, tmp_path):
    root = tmp_path / "skills-src"
    write_skill(
        root,
        "form-showcase",
        input_schema=SHOWCASE_INPUT,
        parameter_schema=SHOWCASE_PARAMETER,
        modes=("auto", "interactive"),
        engines=["codex", "gemini"],
    )
    return install_skill("form-showcase", root)
