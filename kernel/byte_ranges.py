"""Single byte ranges (RFC 9110 §14) for files served in pieces, e.g. a long log."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

CHUNK_BYTES = 64 * 1024
_SINGLE_RANGE = re.compile(r"bytes=(\d{1,18})?-(\d{1,18})?")


class RangeNotSatisfiable(Exception):
    """The range lies wholly past the end of the file (416)."""


def requested_range(header: str | None, size: int) -> tuple[int, int] | None:
    """`(start, end)` (end exclusive) that a `Range` header asks of `size` bytes, or None for the
    whole file: no header, or one this server ignores as RFC 9110 allows (malformed, several ranges)."""
    match = _SINGLE_RANGE.fullmatch((header or "").strip())
    if match is None or match[1] is match[2] is None:
        return None
    first, last = match[1], match[2]
    if first is None:  # a suffix: the last N bytes
        if int(last) == 0 or size == 0:
            raise RangeNotSatisfiable
        return max(0, size - int(last)), size
    start = int(first)
    if last is not None and int(last) < start:
        return None  # not a valid range: ignored
    if start >= size:
        raise RangeNotSatisfiable
    return start, size if last is None else min(size, int(last) + 1)


def file_chunks(handle: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    """Bytes [start, end) of an open file, a chunk at a time, then closes it; never more than
    announced even when the file grows meanwhile."""
    with handle:
        handle.seek(start)
        left = end - start
        while left > 0:
            chunk = handle.read(min(CHUNK_BYTES, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk
