from django.contrib import admin

from portal.leasing.models import (
    Allocation,
    IdempotencyKey,
    Lease,
    LeaseEvent,
    LeaseFault,
    MigInstance,
    Quota,
)


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ("tenant", "gpu_model", "guaranteed_gpus", "max_gpus", "gpu_hour_budget",
                    "max_lease_hours", "max_pending_orders", "allow_spot", "allow_borrowing")
    list_filter = ("gpu_model", "allow_spot", "allow_borrowing")
    search_fields = ("tenant__name", "tenant__slug")


class LeaseEventInline(admin.TabularInline):
    model = LeaseEvent
    extra = 0
    can_delete = False
    readonly_fields = ("created", "kind", "from_state", "to_state", "actor", "reason", "data")


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    """Read-mostly: state changes go through the services (console / API), not here."""

    list_display = ("short_id", "name", "tenant", "state", "gpu_model", "gpu_count", "nodes",
                    "priority", "start_at", "end_at", "wait_reason")
    list_filter = ("state", "priority", "gpu_model", "tenant")
    search_fields = ("id", "name", "tenant__name")
    date_hierarchy = "created"
    readonly_fields = [f.name for f in Lease._meta.fields]
    inlines = [LeaseEventInline]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ("lease", "node", "gpu", "slot", "start_at", "end_at", "live")
    list_filter = ("live",)
    raw_id_fields = ("lease", "gpu", "node")


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(admin.ModelAdmin):
    list_display = ("tenant", "key", "response_status", "created")
    search_fields = ("key",)


@admin.register(LeaseEvent)
class LeaseEventAdmin(admin.ModelAdmin):
    list_display = ("lease", "created", "kind", "from_state", "to_state", "actor", "reason")
    list_filter = ("kind", "to_state")


@admin.register(LeaseFault)
class LeaseFaultAdmin(admin.ModelAdmin):
    """Failed hardware of running leases (written by the healing lifecycle only)."""

    list_display = ("lease", "node", "cause", "fault_at", "fenced_at", "replaced_at",
                    "resolution")
    list_filter = ("resolution",)
    search_fields = ("lease__id", "node__hostname", "cause")

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(MigInstance)
class MigInstanceAdmin(admin.ModelAdmin):
    """MIG instances of leases (written by the MIG pass and the agents' reports only)."""

    list_display = ("lease", "gpu", "profile", "start", "size", "uuid", "created")
    list_filter = ("profile",)
    search_fields = ("lease__id", "uuid", "gpu__uuid")
    raw_id_fields = ("lease", "allocation", "gpu")

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
