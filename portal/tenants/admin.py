from typing import Any

from django.contrib import admin

from portal.tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    SshPublicKey,
    Tenant,
    UserPreference,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "status", "contact_email", "currency", "created")
    list_filter = ("status", "currency")
    search_fields = ("name", "slug", "contact_email")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "user__email", "tenant__name")
    autocomplete_fields = ["user", "tenant"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "user", "tenant", "created", "expires_at", "revoked_at",
                    "last_used_at")
    list_filter = ("tenant",)
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = ("prefix", "secret_hash", "created", "last_used_at")


@admin.register(SshPublicKey)
class SshPublicKeyAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "key_type", "fingerprint", "created")
    search_fields = ("user__username", "name", "fingerprint")
    readonly_fields = ("key_type", "fingerprint", "created")


@admin.register(UserPreference)
class UserPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "language")
    search_fields = ("user__username",)
    list_filter = ("language",)


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Read-only: invitations are made and accepted through the portal (the services)."""

    list_display = ("email", "tenant", "role", "inviter", "created", "expires_at",
                    "accepted_at", "revoked_at")
    list_filter = ("role", "tenant")
    search_fields = ("email", "tenant__name")

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
