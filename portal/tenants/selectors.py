"""Reads of tenants, memberships and keys, scoped by the principal (user + credential)."""

from __future__ import annotations

import hashlib

from django.db.models import QuerySet
from django.utils import timezone

from portal.core.models import AuditLog
from portal.tenants.access import Who, is_staff, principal_of, require_role, tenants_for
from portal.tenants.models import ApiKey, Invitation, Membership, Role, SshPublicKey, Tenant


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

# Roles that get a login on the hosts of their tenant's leases. Viewers read the portal
# only: no shell on the machines (docs/security.md, "Removed members and revocation").
HOST_LOGIN_ROLES = (Role.OWNER, Role.ADMIN, Role.MEMBER)


def host_login_keys(*, tenant: Tenant) -> list[str]:
    """The SSH public keys granted to the lease accounts of ``tenant``'s leases: those of
    its active owners, admins and members, and none at all while the tenant is suspended.
    A system read (desired state), not reachable by a user."""
    if not tenant.is_active:
        return []
    users = (Membership.objects.filter(tenant=tenant, role__in=HOST_LOGIN_ROLES,
                                       user__is_active=True).values("user_id"))
    return list(SshPublicKey.objects.filter(user_id__in=users).order_by("user_id", "name")
                .values_list("public_key", flat=True))


INVITATION_TOKEN_PREFIX = "gpi_"


def hash_token(token: str) -> str:
    """Invitation tokens are 256-bit random secrets: a plain SHA-256 is a sound hash."""
    return hashlib.sha256(token.encode()).hexdigest()


def invitation_by_token(token: str) -> Invitation | None:
    """The open, unexpired invitation ``token`` names; None for anything else."""
    if not token.startswith(INVITATION_TOKEN_PREFIX):
        return None
    return (Invitation.objects.select_related("tenant", "inviter")
            .filter(token_hash=hash_token(token), accepted_at__isnull=True,
                    revoked_at__isnull=True, expires_at__gt=timezone.now()).first())


def invitation_list(*, user: Who, tenant: Tenant) -> QuerySet[Invitation]:
    """Open invitations of ``tenant`` (owners and admins only)."""
    require_role(user, tenant, Role.ADMIN)
    return (Invitation.objects.filter(tenant=tenant, accepted_at__isnull=True,
                                      revoked_at__isnull=True, expires_at__gt=timezone.now())
            .select_related("inviter", "tenant").order_by("email"))


def audit_list(*, user: Who) -> QuerySet[AuditLog]:
    """Platform staff see every entry; tenant owners/admins see the entries of the tenants
    their credential acts for (through a key: the key's tenant only). (Here, not in core:
    who sees what is the tenants app's decision, and core imports no app above it.)"""
    qs = AuditLog.objects.select_related("tenant")
    if is_staff(user):
        return qs
    return qs.filter(tenant__in=tenants_for(user, Role.ADMIN))
