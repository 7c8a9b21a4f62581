from __future__ import annotations

from django.db.models import QuerySet

from portal.tenants.access import AnyUser, is_staff, require_role, tenants_for
from portal.tenants.models import ApiKey, Membership, Role, Tenant


def tenant_list(*, user: AnyUser) -> QuerySet[Tenant]:
    return tenants_for(user).order_by("name")


def membership_list(*, user: AnyUser, tenant: Tenant) -> QuerySet[Membership]:
    require_role(user, tenant, Role.VIEWER)
    return Membership.objects.filter(tenant=tenant).select_related("user", "tenant")


def memberships_of(*, user: AnyUser) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__name")


def api_key_list(*, user: AnyUser) -> QuerySet[ApiKey]:
    """A user's own keys; staff see all keys."""
    qs = ApiKey.objects.select_related("tenant", "user")
    return qs if is_staff(user) else qs.filter(user=user)
