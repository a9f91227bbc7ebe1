"""Content negotiation for views whose own answer is not rendered by DRF."""

from __future__ import annotations

from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer


class JsonWhateverTheClientAccepts(BaseContentNegotiation):
    """Renders DRF responses (here: errors) as JSON, never answering 406 for the Accept header."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return JSONRenderer(), JSONRenderer.media_type
