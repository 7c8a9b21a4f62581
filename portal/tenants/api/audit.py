"""The audit-log API (the entries are core's; who may read them is the tenants app's)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, viewsets

from portal.core.models import AuditLog
from portal.tenants.selectors import audit_list


class AuditLogSerializer(serializers.ModelSerializer[AuditLog]):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = AuditLog
        fields = ["id", "created", "actor_repr", "action", "object_type", "object_id",
                  "object_repr", "tenant", "changes", "ip", "via"]
        read_only_fields = fields


class AuditLogViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """The audit log: staff see all, tenant admins their tenant's. ``?action=`` filters."""

    serializer_class = AuditLogSerializer
    queryset = AuditLog.objects.none()  # typing for the schema; get_queryset scopes

    def get_queryset(self) -> Any:
        qs = audit_list(user=self.request.user)
        if action := self.request.query_params.get("action"):
            qs = qs.filter(action=action)
        if tenant := self.request.query_params.get("tenant"):
            qs = qs.filter(tenant__slug=tenant)
        return qs
