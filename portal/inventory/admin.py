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


# MIG modes and layouts are read-only here: a change must pass the busy-instance guard,
# carry a reason into the audit log and push the node's desired state, which only the
# operator API does (PUT .../mig-mode, POST .../mig-layout; portal.leasing.migmode and
# miglayout). The admin cannot call them: inventory may not import leasing (the apps stay
# acyclic), and a second, admin-only path to the same change is what the guard replaces.
MIG_FIELDS = ("mig_mode", "mig_layout", "mig_change")
MIG_POINTER = ("read-only here. Whole or dynamic: PUT /api/v1/fleet/nodes/{host}/mig-mode "
               "(mode, gpu, reason); a fixed layout: POST /api/v1/fleet/nodes/{host}/"
               "mig-layout (docs/fleet.md, MIG modes and fixed layouts)")


def mig_pointer(hostname: str) -> str:
    """Where an operator changes a node's or GPU's MIG mode (shown in the admin)."""
    return MIG_POINTER.format(host=hostname or "<hostname>")


class _MigReadOnly:
    @admin.display(description="change MIG mode")
    def mig_change(self, obj: Node | Gpu | None) -> str:
        node = obj if isinstance(obj, Node) else getattr(obj, "node", None)
        return mig_pointer(node.hostname if node is not None else "")


class GpuInline(_MigReadOnly, admin.TabularInline):
    model = Gpu
    extra = 0
    readonly_fields = MIG_FIELDS


class HcaPortInline(admin.TabularInline):
    model = HcaPort
    extra = 0
    fk_name = "node"
    raw_id_fields = ("switch",)


@admin.register(Node)
class NodeAdmin(_MigReadOnly, admin.ModelAdmin):
    list_display = ("hostname", "state", "gpu_model", "mig_mode", "leaf", "fabric",
                    "last_heartbeat", "agent_version")
    list_filter = ("state", "gpu_model", "mig_mode", "fabric", "leaf")
    search_fields = ("hostname",)
    list_select_related = ("leaf", "fabric")
    inlines = [GpuInline, HcaPortInline]
    readonly_fields = MIG_FIELDS


@admin.register(Gpu)
class GpuAdmin(_MigReadOnly, admin.ModelAdmin):
    list_display = ("__str__", "model", "uuid", "pci_bus_id", "nvlink_domain", "health",
                    "mig_mode")
    list_filter = ("model", "health", "mig_mode")
    search_fields = ("uuid", "node__hostname")
    list_select_related = ("node",)
    readonly_fields = MIG_FIELDS


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
