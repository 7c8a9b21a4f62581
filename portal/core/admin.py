from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.core.models import AuditLog, MetricBucket


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ("created", "actor_repr", "action", "object_type", "object_repr", "tenant",
                    "ip", "via")
    list_filter = ("action", "object_type", "via", "tenant")
    search_fields = ("actor_repr", "object_repr", "object_id", "action")
    date_hierarchy = "created"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MetricBucket)
class MetricBucketAdmin(admin.ModelAdmin):
    """Read-only: the buckets of the histograms /metrics serves (ADR 0230). Deleting rows
    resets a histogram (Prometheus reads it as a counter reset)."""

    list_display = ("name", "le", "count", "total")
    list_filter = ("name",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
