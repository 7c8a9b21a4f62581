from __future__ import annotations

from django.db.models import QuerySet

from portal.core.models import AuditLog
from portal.tenants.access import AnyUser, is_staff
from portal.tenants.models import Membership, Role


def audit_list(*, user: AnyUser) -> QuerySet[AuditLog]:
    """Staff see every entry; tenant owners/admins see their tenants' entries."""
    qs = AuditLog.objects.select_related("tenant")
    if is_staff(user):
        return qs
    tenants = Membership.objects.filter(user=user, role__in=[Role.OWNER, Role.ADMIN]).values(
        "tenant_id")
    return qs.filter(tenant_id__in=tenants)
