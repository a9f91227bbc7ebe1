"""Read-only admin bases shared by the apps' audit pages (R-UI4): history is changed by the
services, never edited in the admin."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model


class ReadOnlyAdminMixin:
    """History is never edited from the admin: no add, change or delete, every field read-only."""

    model: type[Model]  # supplied by the ModelAdmin or InlineModelAdmin it is mixed into

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None) -> list[str] | tuple[str, ...]:
        return [field.name for field in self.model._meta.fields]


class ReadOnlyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    pass


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    can_delete = False
    extra = 0
    show_change_link = True
