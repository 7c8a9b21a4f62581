from __future__ import annotations

from django.contrib import admin

from portal.sso.models import ExternalIdentity, MappingRule


@admin.register(MappingRule)
class MappingRuleAdmin(admin.ModelAdmin):
    list_display = ["tenant", "role", "claim", "match", "values", "issuer", "enabled"]
    list_filter = ["enabled", "role", "match"]


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "issuer", "subject", "updated"]
    search_fields = ["subject", "user__username"]
    readonly_fields = ["user", "issuer", "subject", "last_login_claims", "updated"]
