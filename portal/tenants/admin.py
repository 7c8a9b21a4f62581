from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet

from portal.tenants import hooks
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

    # Edits here bypass the services' rules but not the push: who may log in follows.
    def save_model(self, request: Any, obj: Tenant, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        hooks.access_changed_on_commit([obj.pk])

    def save_formset(self, request: Any, form: Any, formset: Any, change: bool) -> None:
        super().save_formset(request, form, formset, change)
        hooks.access_changed_on_commit([form.instance.pk])


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "user__email", "tenant__name")
    autocomplete_fields = ["user", "tenant"]

    def save_model(self, request: Any, obj: Membership, form: Any, change: bool) -> None:
        old = Membership.objects.filter(pk=obj.pk).values_list("tenant_id", flat=True).first()
        super().save_model(request, obj, form, change)
        hooks.access_changed_on_commit({obj.tenant_id, old} - {None})

    def delete_model(self, request: Any, obj: Membership) -> None:
        tenant_id = obj.tenant_id
        super().delete_model(request, obj)
        hooks.access_changed_on_commit([tenant_id])

    def delete_queryset(self, request: Any, queryset: QuerySet[Membership]) -> None:
        tenant_ids = set(queryset.values_list("tenant_id", flat=True))
        super().delete_queryset(request, queryset)
        hooks.access_changed_on_commit(tenant_ids)


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

    def delete_model(self, request: Any, obj: SshPublicKey) -> None:
        tenant_ids = list(Membership.objects.filter(user_id=obj.user_id)
                          .values_list("tenant_id", flat=True))
        super().delete_model(request, obj)
        hooks.access_changed_on_commit(tenant_ids)

    def delete_queryset(self, request: Any, queryset: QuerySet[SshPublicKey]) -> None:
        tenant_ids = list(Membership.objects.filter(user_id__in=queryset.values("user_id"))
                          .values_list("tenant_id", flat=True))
        super().delete_queryset(request, queryset)
        hooks.access_changed_on_commit(tenant_ids)


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


class PushingUserAdmin(UserAdmin):  # type: ignore[type-arg]
    """Django's user admin; (de)activating or deleting a user here also reaches the hosts.
    Prefer ``services.user_set_active``: it keeps each tenant's last admin."""

    def save_model(self, request: Any, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        hooks.access_changed_on_commit(_tenants_of(obj.pk))

    def delete_model(self, request: Any, obj: Any) -> None:
        tenant_ids = _tenants_of(obj.pk)
        super().delete_model(request, obj)
        hooks.access_changed_on_commit(tenant_ids)


def _tenants_of(user_id: Any) -> list[Any]:
    return list(Membership.objects.filter(user_id=user_id).values_list("tenant_id", flat=True))


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, PushingUserAdmin)
