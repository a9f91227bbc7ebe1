"""Keeps API keys and tokens out of log output."""

from __future__ import annotations

import logging
import re

SECRET_PATTERNS = [
    re.compile(r"sr_[0-9a-f]{8}[A-Za-z0-9_\-]{16,}"),  # our API tokens
    re.compile(r"(?i)(authorization:\s*(?:token|bearer)\s+)\S+"),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),
]


def redact_values(text: str, secrets: tuple[str, ...]) -> str:
    """Only the given secret values; safe for data whose other content must stay untouched."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[REDACTED]")
    return text


def redact(text: str, extra_secrets: tuple[str, ...] = ()) -> str:
    text = redact_values(text, extra_secrets)
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[REDACTED]", text)
    return text


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True
