"""Reads of tenants, memberships and keys, scoped by the principal (user + credential)."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.tenants.access import Who, principal_of, require_role, tenants_for
from portal.tenants.models import ApiKey, Membership, Role, Tenant


def tenant_list(*, user: Who) -> QuerySet[Tenant]:
    return tenants_for(user).order_by("name")


def membership_list(*, user: Who, tenant: Tenant) -> QuerySet[Membership]:
    require_role(user, tenant, Role.VIEWER)
    return Membership.objects.filter(tenant=tenant).select_related("user", "tenant")


def memberships_of(*, user: Who) -> QuerySet[Membership]:
    """The user's own memberships in the tenants its credential may act for."""
    p = principal_of(user)
    if not p.authenticated:
        return Membership.objects.none()
    return (Membership.objects.filter(user=p.user, tenant__in=tenants_for(p))
            .select_related("tenant").order_by("tenant__name"))


def api_key_list(*, user: Who) -> QuerySet[ApiKey]:
    """A user's own keys; platform staff see all keys. Through a key: only the user's keys
    for the key's tenant, and none once the user can no longer act there (removed)."""
    p = principal_of(user)
    qs = ApiKey.objects.select_related("tenant", "user")
    if not p.authenticated:
        return qs.none()
    if p.platform_staff:
        return qs
    qs = qs.filter(user=p.user)
    if p.via_key:
        return qs.filter(tenant__in=tenants_for(p))
    return qs
