"""The sections higher apps add to the settings page (`accounts.settings_page`), each registered
in its app's `ready()`. Apart from the page so that registering imports nothing of the web's:
every process runs `ready()`, the worker and each `manage.py` command too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class Section:
    """`template` is the section's body; the page gives it its `<section id="{anchor}">`, its
    heading and its link in the page's contents."""

    anchor: str
    title: str
    template: str
    # The dotted path of the section's template context for a user, given what the POST being
    # answered shows (a bound form with its errors, something made), by the names the templates
    # use: a view module's function, imported when a page is first rendered.
    context: str

    def context_for(self, user: User, shown: Mapping[str, Any]) -> dict[str, Any]:
        return import_string(self.context)(user, shown)


_sections: dict[str, Section] = {}


def register(section: Section) -> None:
    """By anchor: an app made ready twice (some tests do) keeps its one place."""
    _sections[section.anchor] = section


def registered() -> list[Section]:
    """In the order the apps registered them (the order they are installed)."""
    return list(_sections.values())
