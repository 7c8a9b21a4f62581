from __future__ import annotations

from django.db.models import QuerySet

from portal.core.models import AuditLog
from portal.tenants.access import Who, is_staff, tenants_for
from portal.tenants.models import Role


def audit_list(*, user: Who) -> QuerySet[AuditLog]:
    """Platform staff see every entry; tenant owners/admins see the entries of the tenants
    their credential acts for (through a key: the key's tenant only)."""
    qs = AuditLog.objects.select_related("tenant")
    if is_staff(user):
        return qs
    return qs.filter(tenant__in=tenants_for(user, Role.ADMIN))
