"""Memberships granted by an external source (SSO mapping rules, ADR 0222).

The actor is the system (``None``): the rules are the operator's, applied at a login. The
same consequences as a hand-made change follow — audit, keys revoked, host access pushed —
and the last-admin rule holds: a removal or demotion that would leave the tenant without an
active owner/admin is kept and reported (audited as ``membership.sso_kept``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from portal.core.services import audit_record
from portal.tenants import hooks
from portal.tenants.models import ROLE_RANK, Membership, Role, Tenant
from portal.tenants.services import (
    ADMIN_ROLES,
    _admins_left_without,
    _lock_tenant,
    _revoke_member_keys,
)


def _would_orphan(member: Membership, role: str | None) -> bool:
    losing_admin = member.role in ADMIN_ROLES and (role is None or role not in ADMIN_ROLES)
    return losing_admin and _admins_left_without(member) == 0


def _keep(member: Membership, *, wanted: str | None, source: str) -> None:
    audit_record(actor=None, action="membership.sso_kept", obj=member, tenant=member.tenant,
                 changes={"user": member.user.get_username(), "role": member.role,
                          "wanted": wanted or "removed", "source": source,
                          "reason": "last owner/admin of the tenant"})


@transaction.atomic
def sourced_grant(*, tenant: Tenant, user: Any, role: str, source: str) -> Membership:
    """Add ``user`` with ``role`` or move an SSO-granted membership to ``role``; a hand-made
    membership (source ``local``) is never changed by rules."""
    _lock_tenant(tenant.pk)
    member = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    if member is None:
        member = Membership.objects.create(tenant=tenant, user=user, role=role, source=source)
        audit_record(actor=None, action="membership.create", obj=member, tenant=tenant,
                     changes={"user": user.get_username(), "role": role, "source": source})
        hooks.access_changed_on_commit([tenant.pk])
        return member
    if member.source != source or member.role == role:
        return member
    if _would_orphan(member, role):
        _keep(member, wanted=role, source=source)
        return member
    old, member.role = member.role, role
    member.save(update_fields=["role"])
    audit_record(actor=None, action="membership.update", obj=member, tenant=tenant,
                 changes={"role": [old, role], "source": source})
    hooks.access_changed_on_commit([tenant.pk])
    return member


@transaction.atomic
def sourced_remove(*, member: Membership, source: str) -> bool:
    """Remove a membership the rules no longer grant (only one ``source`` granted).
    Returns False where the last-admin rule kept it."""
    _lock_tenant(member.tenant_id)
    member = (Membership.objects.select_for_update(of=("self",))
              .select_related("tenant", "user").get(pk=member.pk))
    if member.source != source:
        return False
    if _would_orphan(member, None):
        _keep(member, wanted=None, source=source)
        return False
    audit_record(actor=None, action="membership.delete", obj=member, tenant=member.tenant,
                 changes={"user": member.user.get_username(), "role": member.role,
                          "source": source})
    _revoke_member_keys(None, member)
    tenant_id = member.tenant_id
    member.delete()
    hooks.access_changed_on_commit([tenant_id])
    return True


def strongest(roles: list[str]) -> str:
    return max(roles, key=lambda r: ROLE_RANK[Role(r)])
