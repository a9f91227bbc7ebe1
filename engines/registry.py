"""The engines this service can run. A new engine = one adapter module + one line below."""

from __future__ import annotations

from .base import EngineAdapter
from .claude import ClaudeAdapter
from .codex import CodexAdapter
from .gemini import GeminiAdapter
from .iflow import IFlowAdapter

ADAPTERS: dict[str, EngineAdapter] = {
    adapter.name: adapter
    for adapter in (
        CodexAdapter(),
        GeminiAdapter(),
        IFlowAdapter(),
        ClaudeAdapter(),
    )
}
ENGINE_NAMES: tuple[str, ...] = tuple(ADAPTERS)


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for ``name``; KeyError names the known engines."""
    try:
        return ADAPTERS[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}") from None
