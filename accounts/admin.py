from django.contrib import admin

from .models import ApiToken, SpendLimit
from .services import revoke_tokens


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "user", "created_at", "last_used_at", "expires_at", "revoked_at")
    list_filter = ("revoked_at", "expires_at")
    search_fields = ("user__username", "name", "lookup")
    readonly_fields = ("user", "lookup", "created_at", "last_used_at")
    exclude = ("key_hash",)
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False  # keys are shown once, by `manage.py create_api_token`

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        revoke_tokens(queryset)


@admin.register(SpendLimit)
class SpendLimitAdmin(admin.ModelAdmin):
    list_display = ("user", "max_tokens_per_day")
    search_fields = ("user__username",)
    raw_id_fields = ("user",)
