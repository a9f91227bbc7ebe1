"""The model APIs the engines speak, as the provider relay (engines.relay) must know them (R-SB8).

Each API names the one header its provider reads the key from, the calls a CLI really makes
(measured on the real CLIs: research notes in docs/engines.md), and where a response reports the
tokens it cost (R-SB9), streamed or not. Paths are relative to the configured base URL's path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A model name inside a path: what providers use, and nothing that could step out of it.
_MODEL = r"[A-Za-z0-9][A-Za-z0-9._@-]*"

Usage = tuple[int | None, int | None]  # (input tokens, output tokens) a document reports, cumulative


@dataclass(frozen=True)
class ProviderApi:
    name: str
    key_header: str  # lower case
    key_prefix: str  # what precedes the key in that header
    routes: tuple[tuple[str, re.Pattern[str]], ...]  # (method, whole path after the base path)
    usage_of: Callable[[dict[str, Any]], Usage]
    # Chat Completions streams report usage only when asked: the relay asks, so no call goes uncounted.
    asks_stream_usage: bool = False

    def allows(self, method: str, path: str) -> bool:
        return any(method == allowed and pattern.fullmatch(path) for allowed, pattern in self.routes)


def _routes(*pairs: tuple[str, str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((method, re.compile(path)) for method, path in pairs)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _sum(*values: Any) -> int | None:
    counted = [_int(value) for value in values]
    present = [value for value in counted if value is not None]
    return sum(present) if present else None


def _responses_usage(doc: dict[str, Any]) -> Usage:
    # Streamed: the response.completed (or .incomplete/.failed) event carries the response; not
    # streamed: the response itself.
    response = doc.get("response")
    usage = (response if isinstance(response, dict) else doc).get("usage")
    if not isinstance(usage, dict):
        return None, None
    return _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))


def _chat_usage(doc: dict[str, Any]) -> Usage:
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        return None, None
    return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))


def _anthropic_usage(doc: dict[str, Any]) -> Usage:
    # message_start holds the input (cache reads and writes included), message_delta the output
    # so far; a response not streamed holds both.
    message = doc.get("message")
    usage = (message if isinstance(message, dict) else doc).get("usage")
    if not isinstance(usage, dict):
        return None, None
    prompt = _sum(
        usage.get("input_tokens"), usage.get("cache_creation_input_tokens"), usage.get("cache_read_input_tokens")
    )
    return (prompt if doc.get("type") != "message_delta" else None), _int(usage.get("output_tokens"))


def _gemini_usage(doc: dict[str, Any]) -> Usage:
    # Every chunk of a stream repeats the totals so far. countTokens answers `totalTokens`, which
    # is a count, not a cost: it has no usageMetadata.
    usage = doc.get("usageMetadata")
    if not isinstance(usage, dict):
        return None, None
    prompt = _sum(usage.get("promptTokenCount"), usage.get("toolUsePromptTokenCount"))
    total = _int(usage.get("totalTokenCount"))
    if total is not None and prompt is not None:
        return prompt, max(total - prompt, 0)
    return prompt, _sum(usage.get("candidatesTokenCount"), usage.get("thoughtsTokenCount"))


OPENAI_RESPONSES = ProviderApi(
    name="openai-responses",
    key_header="authorization",
    key_prefix="Bearer ",
    routes=_routes(
        ("POST", r"/responses"),
        ("POST", r"/responses/compact"),
        ("GET", r"/models"),
        ("GET", rf"/models/{_MODEL}"),
    ),
    usage_of=_responses_usage,
)
OPENAI_CHAT = ProviderApi(
    name="openai-chat",
    key_header="authorization",
    key_prefix="Bearer ",
    routes=_routes(("POST", r"/chat/completions"), ("GET", r"/models"), ("GET", rf"/models/{_MODEL}")),
    usage_of=_chat_usage,
    asks_stream_usage=True,
)
ANTHROPIC_MESSAGES = ProviderApi(
    name="anthropic-messages",
    key_header="x-api-key",
    key_prefix="",
    routes=_routes(
        ("POST", r"/v1/messages"),
        ("POST", r"/v1/messages/count_tokens"),
        ("GET", r"/v1/models"),
        ("GET", rf"/v1/models/{_MODEL}"),
    ),
    usage_of=_anthropic_usage,
)
GEMINI = ProviderApi(
    name="gemini",
    key_header="x-goog-api-key",
    key_prefix="",
    routes=_routes(
        ("POST", rf"/v1(?:beta|alpha)?/models/{_MODEL}:(?:streamGenerateContent|generateContent|countTokens)"),
        ("GET", r"/v1(?:beta|alpha)?/models"),
        ("GET", rf"/v1(?:beta|alpha)?/models/{_MODEL}"),
    ),
    usage_of=_gemini_usage,
)
