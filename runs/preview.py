"""Inline previews of Markdown and text artifacts on the run page (R-AC5), rendered safely.

Markdown goes through markdown-it-py with raw HTML off, then nh3 (an allow-list sanitiser): no
script, no event handlers, no images (so no remote content is fetched), links only to http(s)
and mailto and opened without referrer. Text is escaped into a <pre>. Anything else is a download.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

import nh3
from django.utils.html import escape
from markdown_it import MarkdownIt

if TYPE_CHECKING:
    from _typeshed import SupportsRead

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt", ".text", ".log", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml", ".xml"})
MAX_PREVIEW_BYTES = 512 * 1024

_ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "i", "kbd", "li", "ol", "p", "pre", "s", "strong", "sub", "sup", "table", "tbody", "td", "th",
    "thead", "tr", "ul",
}  # fmt: skip
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "td": {"align"}, "th": {"align"}, "ol": {"start"}}
# breaks: a line break the author wrote stays one (a haiku keeps its three lines).
_markdown = (
    MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable("table").enable("strikethrough")
)


def previewable(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in MARKDOWN_SUFFIXES | TEXT_SUFFIXES


def render_markdown(text: str) -> str:
    """Safe HTML of `text`, its headings one level down (# is an h2): the page showing it has
    its own h1."""
    tokens = _markdown.parse(text)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + 1, 6)}"
    return nh3.clean(
        _markdown.renderer.render(tokens, _markdown.options, {}),
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def render_preview(name: str, handle: SupportsRead[bytes]) -> str:
    """The open file ``name`` (a previewable kind) as a safe HTML fragment."""
    suffix = PurePosixPath(name).suffix.lower()
    raw = handle.read(MAX_PREVIEW_BYTES + 1)
    text = raw[:MAX_PREVIEW_BYTES].decode("utf-8", errors="replace")
    note = '<p class="preview-note">Preview cut at 512 KB; download the file for all of it.</p>'
    tail = note if len(raw) > MAX_PREVIEW_BYTES else ""
    if suffix in MARKDOWN_SUFFIXES:
        return f'<div class="markdown">{render_markdown(text)}</div>{tail}'
    return f'<pre class="text-preview">{escape(text)}</pre>{tail}'
