"""Read-only admin bases shared by the apps' audit pages (R-UI4): history is changed by the
services, never edited in the admin."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import admin
from django.db.models import JSONField, Model
from django.utils.html import format_html

# The read-only name under which a JSON field is shown indented (ReadOnlyAdminMixin).
FORMATTED = "_formatted"


class ReadOnlyAdminMixin:
    """History is never edited from the admin: no add, change or delete, every field read-only,
    JSON shown indented (Django shows it on one line)."""

    model: type[Model]  # supplied by the ModelAdmin or InlineModelAdmin it is mixed into

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def json_fields(self) -> list[str]:
        return [field.name for field in self.model._meta.fields if isinstance(field, JSONField)]

    def shown(self, names: Sequence[Any]) -> list[Any]:
        """`names` with each JSON field replaced by its indented display."""
        json_names = set(self.json_fields())
        return [f"{name}{FORMATTED}" if name in json_names else name for name in names]

    def get_readonly_fields(self, request, obj=None) -> list[str] | tuple[str, ...]:
        return self.shown([field.name for field in self.model._meta.fields])

    def get_fields(self, request, obj=None):
        return self.shown(super().get_fields(request, obj))  # type: ignore[misc]

    def get_exclude(self, request, obj=None):
        return self.json_fields()  # their displays stand in for them

    def __getattr__(self, name: str) -> Callable[[Model], str]:
        """`<json field>_formatted`: the field's value as indented JSON in a <pre>."""
        field_name = name.removesuffix(FORMATTED)
        if field_name == name or field_name not in self.json_fields():
            raise AttributeError(name)

        def formatted(obj: Model) -> str:
            value = getattr(obj, field_name)
            return format_html(
                '<pre class="readonly-json" tabindex="0">{}</pre>', json.dumps(value, indent=2, ensure_ascii=False)
            )

        field = next(field for field in self.model._meta.fields if field.name == field_name)
        formatted.short_description = field.verbose_name  # type: ignore[attr-defined]  # read by the admin
        return formatted


class ReadOnlyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    pass


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    can_delete = False
    extra = 0
    show_change_link = True
