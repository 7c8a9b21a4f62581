from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal.core.errors import ApplicationError
from portal.tenants import hooks, services
from portal.tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    SshPublicKey,
    Tenant,
    UserPreference,
)


class MembershipInline(admin.TabularInline):
    """Read-only here: a membership is added, changed or removed on its own admin page
    (through the services, so the last-admin rule holds)."""

    model = Membership
    extra = 0
    fields = ("user", "role", "max_gpus", "created")
    readonly_fields = fields
    show_change_link = True
    can_delete = False

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


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


class MembershipAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    """Refuses what the services refuse (last admin, last owner, owner-only grants), with
    the services' message on the field, before anything is saved."""

    request: Any = None

    class Meta:
        model = Membership
        fields = ("tenant", "user", "role", "max_gpus")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.instance._state.adding and "role" in data:
            try:
                services.check_role_change(self.request.user, self.instance, data["role"])
            except ApplicationError as exc:
                raise forms.ValidationError({"role": exc.message}) from exc
        return data


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    """Every write goes through ``portal.tenants.services`` (its rules, audit and push)."""

    form = MembershipAdminForm
    list_display = ("user", "tenant", "role", "created")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "user__email", "tenant__name")
    autocomplete_fields = ["user", "tenant"]
    actions = ["remove_members"]

    def get_readonly_fields(self, request: Any, obj: Any = None) -> tuple[str, ...]:
        return ("tenant", "user") if obj is not None else ()

    def get_form(self, request: Any, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"request": request})

    def get_actions(self, request: Any) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # it would bypass the last-admin rule
        return actions

    @transaction.atomic
    def save_model(self, request: Any, obj: Membership, form: Any, change: bool) -> None:
        if change:
            member = services.membership_change_role(actor=request.user, member=obj,
                                                     role=obj.role)
        else:
            member = services.membership_grant(actor=request.user, tenant=obj.tenant,
                                               user=obj.user, role=obj.role)
            obj.pk = member.pk
        if member.max_gpus != obj.max_gpus:
            services.membership_set_limit(actor=request.user, membership=member,
                                          max_gpus=obj.max_gpus)

    def delete_view(self, request: Any, object_id: str, extra_context: Any = None) -> Any:
        member = self.get_object(request, unquote(object_id))
        if request.method == "POST" and member is not None:
            if not self.has_delete_permission(request, member):
                raise DjangoPermissionDenied
            try:
                services.membership_remove(actor=request.user, member=member)
            except ApplicationError as exc:
                self.message_user(request, exc.message, level=messages.ERROR)
                return redirect("admin:tenants_membership_change", member.pk)
            self.message_user(request, _("Removed %(member)s.") % {"member": member})
            return redirect("admin:tenants_membership_changelist")
        return super().delete_view(request, object_id, extra_context)

    @admin.action(description=gettext_lazy("Remove selected members (keeps each tenant's "
                                             "last admin)"))
    def remove_members(self, request: Any, queryset: QuerySet[Membership]) -> None:
        for member in queryset.select_related("tenant", "user"):
            try:
                services.membership_remove(actor=request.user, member=member)
            except ApplicationError as exc:
                self.message_user(request, f"{member}: {exc.message}", level=messages.ERROR)
            else:
                self.message_user(request, _("Removed %(member)s.") % {"member": member})


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


def _last_admin_problem(user: Any) -> str | None:
    tenants = services.last_admin_of(user)
    if not tenants:
        return None
    names = ", ".join(t.name for t in tenants[:3])
    return _("%(message)s (last owner/admin of: %(tenants)s)") % {
        "message": services.last_admin_message(), "tenants": names}


class PushingUserChangeForm(UserAdmin.form):  # type: ignore[name-defined,misc]
    """Refuses, on the ``is_active`` field, to deactivate a tenant's last owner/admin
    (the rule ``services.user_set_active`` keeps)."""

    def clean_is_active(self) -> bool:
        active = bool(self.cleaned_data.get("is_active"))
        deactivating = bool(self.instance.pk and self.instance.is_active and not active)
        if deactivating and (problem := _last_admin_problem(self.instance)) is not None:
            raise forms.ValidationError(problem, code="last_admin")
        return active


class PushingUserAdmin(UserAdmin):  # type: ignore[type-arg]
    """Django's user admin; (de)activating or deleting a user here also reaches the hosts,
    and keeps each tenant's last admin: a change of ``is_active`` goes through
    ``services.user_set_active`` (locked re-check, audit, host push); deleting a tenant's
    last admin is refused (regression: the admin skipped the rule)."""

    form = PushingUserChangeForm

    @transaction.atomic
    def save_model(self, request: Any, obj: Any, form: Any, change: bool) -> None:
        if change and "is_active" in form.changed_data:
            wanted = obj.is_active
            obj.is_active = not wanted  # the service flips it, under the tenant locks
            super().save_model(request, obj, form, change)
            services.user_set_active(actor=request.user, user=obj, active=wanted)
            obj.is_active = wanted
        else:
            super().save_model(request, obj, form, change)
        hooks.access_changed_on_commit(_tenants_of(obj.pk))

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        if obj is not None and services.last_admin_of(obj):
            return False
        return bool(super().has_delete_permission(request, obj))

    def delete_model(self, request: Any, obj: Any) -> None:
        tenant_ids = _tenants_of(obj.pk)
        super().delete_model(request, obj)
        hooks.access_changed_on_commit(tenant_ids)

    def delete_queryset(self, request: Any, queryset: QuerySet[Any]) -> None:
        refused = [u for u in queryset if services.last_admin_of(u)]
        if refused:
            self.message_user(request, _("Not deleted: %(users)s — %(message)s") % {
                "users": ", ".join(u.get_username() for u in refused[:5]),
                "message": services.last_admin_message()}, messages.ERROR)
            queryset = queryset.exclude(pk__in=[u.pk for u in refused])
        tenant_ids = [t for u in queryset for t in _tenants_of(u.pk)]
        super().delete_queryset(request, queryset)
        hooks.access_changed_on_commit(tenant_ids)


def _tenants_of(user_id: Any) -> list[Any]:
    return list(Membership.objects.filter(user_id=user_id).values_list("tenant_id", flat=True))


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, PushingUserAdmin)
