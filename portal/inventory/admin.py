from typing import Any

from django.contrib import admin

from portal.inventory.models import Fabric, Gpu, HcaPort, Node, StorageEndpoint, Switch, SwitchLink


@admin.register(Fabric)
class FabricAdmin(admin.ModelAdmin):
    list_display = ("name", "description", "created")
    search_fields = ("name",)


@admin.register(Switch)
class SwitchAdmin(admin.ModelAdmin):
    list_display = ("description", "guid", "role", "fabric", "ports", "lid")
    list_filter = ("role", "fabric")
    search_fields = ("description", "guid")


@admin.register(SwitchLink)
class SwitchLinkAdmin(admin.ModelAdmin):
    list_display = ("a", "a_port", "b", "b_port", "speed", "fabric")
    list_filter = ("fabric",)
    list_select_related = ("a", "b", "fabric")


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0


class HcaPortInline(admin.TabularInline):
    model = HcaPort
    extra = 0
    fk_name = "node"
    raw_id_fields = ("switch",)


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("hostname", "state", "gpu_model", "mig_mode", "leaf", "fabric",
                    "last_heartbeat", "agent_version")
    list_filter = ("state", "gpu_model", "mig_mode", "fabric", "leaf")
    search_fields = ("hostname",)
    list_select_related = ("leaf", "fabric")
    inlines = [GpuInline, HcaPortInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("__str__", "model", "uuid", "pci_bus_id", "nvlink_domain", "health",
                    "mig_mode")
    list_filter = ("model", "health", "mig_mode")
    search_fields = ("uuid", "node__hostname")
    list_select_related = ("node",)


@admin.register(HcaPort)
class HcaPortAdmin(admin.ModelAdmin):
    list_display = ("port_guid", "node", "device", "port_number", "lid", "rate", "switch",
                    "switch_port")
    list_filter = ("fabric",)
    search_fields = ("port_guid", "node_guid", "node__hostname", "description")
    list_select_related = ("node", "switch")


@admin.register(StorageEndpoint)
class StorageEndpointAdmin(admin.ModelAdmin):
    """Read-only: storage is declared in the console or the API, whose service audits the
    change and pushes the partition map."""

    list_display = ("name", "port_guid", "fabric", "created")
    list_filter = ("fabric",)
    search_fields = ("name", "port_guid")

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
