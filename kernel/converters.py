"""URL converters the routes share."""

from __future__ import annotations

from django.urls.converters import PathConverter


class AnyPathConverter(PathConverter):
    """Like `path`, but any character, newlines included: an artifact may be named with control
    characters and must still download (R-FS3); the file lookup itself refuses what is unsafe."""

    regex = "(?s:.+)"
