"""API clients of the tests and the bodies they send."""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import async_to_sync
from rest_framework.test import APIClient


def client_for(user) -> APIClient:
    """A client with a token of its own for `user`, safe to use from another thread."""
    from accounts.models import ApiToken

    _, key = ApiToken.issue(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    client.token_key = key  # type: ignore[attr-defined]
    client.user = user  # type: ignore[attr-defined]
    return client


def job_body(
    skill_id: str = "haiku-writer",
    *,
    engine: str = "codex",
    input: Any = None,
    parameter: Any = None,
    runtime_options: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """A POST /v1/jobs body; the haiku writer gets its required topic unless `input` is given."""
    body: dict[str, Any] = {
        "skill_id": skill_id,
        "engine": engine,
        "input": {"topic": "sea"} if input is None and skill_id == "haiku-writer" else (input or {}),
        "parameter": parameter or {},
        "runtime_options": runtime_options or {},
    }
    body.update(extra)
    return body


def read_event_stream(response, timeout: float = 10) -> str:
    """Everything an in-process SSE response sends; it must end on its own within `timeout`."""

    async def collect() -> str:
        parts: list[str] = []

        async def read() -> None:
            async for chunk in response.streaming_content:
                parts.append(chunk.decode() if isinstance(chunk, bytes) else chunk)

        await asyncio.wait_for(read(), timeout=timeout)
        return "".join(parts)

    return async_to_sync(collect)()
