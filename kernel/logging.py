"""Keeps API keys and tokens out of log output."""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Callable
from typing import IO, TextIO

REDACTED = "[REDACTED]"
REDACTED_BYTES = REDACTED.encode()
# Each pattern with what continues its value; group 1, where there is one, is the name kept
# before the value.
SECRET_PATTERNS = [
    (re.compile(r"sr_[0-9a-f]{8}[A-Za-z0-9_\-]{16,}"), r"[A-Za-z0-9_\-]"),  # our API tokens
    (re.compile(r"(?i)(authorization:\s*(?:token|bearer)\s+)\S+"), r"\S"),
    (
        re.compile(r"(?i)((?:api[_-]?key|token|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
        r"[^\s\"',}]",
    ),
    (re.compile(r"sk-[A-Za-z0-9_\-]{16,}"), r"[A-Za-z0-9_\-]"),
]
# A stream is redacted in pieces of about this many bytes...
READ_BYTES = 1024 * 1024
# ...each holding back this many characters until the next piece comes, so that a secret
# straddling two pieces is seen whole. Longer than any key; a secret's name and its value kept
# apart by more blank space than this are not recognised across pieces.
HOLD_CHARS = 64 * 1024


def _secret_values(secrets: tuple[str, ...]) -> list[str]:
    return [secret for secret in secrets if secret and len(secret) >= 4]


def _keep_name(match: re.Match[str]) -> str:
    return (match.group(1) if match.groups() else "") + REDACTED


def redact_values(text: str, secrets: tuple[str, ...]) -> str:
    """Only the given secret values; safe for data whose other content must stay untouched."""
    for secret in _secret_values(secrets):
        text = text.replace(secret, REDACTED)
    return text


def redact(text: str, extra_secrets: tuple[str, ...] = ()) -> str:
    text = redact_values(text, extra_secrets)
    for pattern, _ in SECRET_PATTERNS:
        text = pattern.sub(_keep_name, text)
    return text


class ValueRedactor:
    """`redact_values` over bytes given piece by piece: a file of any size and any content (nothing
    is decoded, so a binary file stays intact), in memory bounded by the pieces. It holds back the
    last bytes of each piece, too few to hold a whole value, until more comes, so a value cut in two
    by a piece's end is still found. `found` counts the values replaced so far."""

    def __init__(self, secrets: tuple[str, ...]):
        self._values = [secret.encode() for secret in _secret_values(secrets)]
        self._hold = max((len(value) for value in self._values), default=1) - 1
        self._pending = b""
        self.found = 0

    def feed(self, data: bytes, final: bool = False) -> bytes:
        """What of `data` (and the bytes held before) can be let out now, redacted."""
        data = self._pending + data
        for value in self._values:
            if count := data.count(value):
                self.found += count
                data = data.replace(value, REDACTED_BYTES)
        cut = len(data) if final else max(len(data) - self._hold, 0)
        self._pending = data[cut:]
        return data[:cut]


def redact_stream(source: IO[bytes], target: TextIO, extra_secrets: tuple[str, ...] = ()) -> int:
    """What `redact` makes of the whole of `source` (UTF-8), written to `target` in memory
    bounded by READ_BYTES and HOLD_CHARS, however long its lines: each of redact's replacements
    in turn, over pieces cut where none of its matches straddles the cut. Returns how many of
    `extra_secrets`' values it replaced."""
    values = [
        _StreamSubstitution(re.compile(re.escape(secret)), lambda _: REDACTED, None, max(HOLD_CHARS, len(secret)))
        for secret in _secret_values(extra_secrets)
    ]
    steps = values + [_StreamSubstitution(pattern, _keep_name, value, HOLD_CHARS) for pattern, value in SECRET_PATTERNS]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write(text: str, final: bool = False) -> None:
        for step in steps:
            text = step.feed(text, final)
        target.write(text)

    for chunk in iter(lambda: source.read(READ_BYTES), b""):
        write(decoder.decode(chunk))
    write(decoder.decode(b"", final=True), final=True)
    return sum(step.replaced for step in values)


class _StreamSubstitution:
    """`pattern.sub(replace, text)` over text given piece by piece. It holds back `hold`
    characters, and any match straddling them, until more comes; a match still growing past
    `hold` characters (a secret's name then a flood of value characters) is replaced at once, and
    the characters continuing its value (`value`, a character class) are dropped as they come."""

    def __init__(self, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str], value: str | None, hold: int):
        self._pattern = pattern
        self._replace = replace
        self._value = re.compile(f"{value}*") if value else None
        self._hold = hold
        self._pending = ""
        self._dropping = False
        self.replaced = 0

    def feed(self, text: str, final: bool) -> str:
        if self._dropping:
            assert self._value is not None
            text = text[self._value.match(text).end() :]  # type: ignore[union-attr]  # `*` matches ""
            self._dropping = not text
        text = self._pending + text
        cut = len(text) if final else len(text) - self._hold
        out: list[str] = []
        done = 0
        for match in self._pattern.finditer(text) if cut > 0 else ():
            if match.start() >= cut:
                break
            if match.end() > cut:
                if match.start() > 0:
                    cut = match.start()  # held back whole, to be read again with what follows
                    break
                cut = match.end()  # it begins what was held: whole now, or still growing past the hold
                self._dropping = cut == len(text) and self._value is not None
            out += (text[done : match.start()], self._replace(match))
            done = match.end()
            self.replaced += 1
        cut = max(cut, 0)
        out.append(text[done:cut])
        self._pending = text[cut:]
        return "".join(out)


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True
