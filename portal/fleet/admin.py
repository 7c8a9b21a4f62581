"""Operators' view of the fleet. Agent-written rows are read-only here: writes go through
``portal.fleet.services`` (tokens: ``manage.py agent_token create``)."""

from typing import Any

from django.contrib import admin

from portal.fleet.models import (
    Agent,
    AgentCredential,
    AgentReport,
    BootstrapToken,
    EnrolmentRequest,
    FabricDesiredState,
    FabricObservedState,
    GpuTelemetry,
    NodeDesiredState,
    NodeHealth,
    NodeObservedState,
    NodeValidation,
    PortTelemetry,
    ServiceEvent,
    TelemetrySample,
    TenantPartition,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(ReadOnlyAdmin):
    list_display = ("agent_id", "role", "hostname", "agent_version", "enrolled_at",
                    "last_seen", "last_seq", "dropped_reports")
    list_filter = ("role",)
    search_fields = ("agent_id", "hostname")


@admin.register(BootstrapToken)
class BootstrapTokenAdmin(ReadOnlyAdmin):
    list_display = ("pk", "role", "hostname_pattern", "allow_reenrol", "created", "expires_at",
                    "used_at", "used_by", "note")
    exclude = ("token_hash",)


@admin.register(EnrolmentRequest)
class EnrolmentRequestAdmin(ReadOnlyAdmin):
    """Decisions are made on Console → Enrolments (audited), not here."""

    list_display = ("hostname", "role", "agent", "state", "created", "attempts",
                    "remote_addr", "decided_by", "decided_at")
    list_filter = ("state", "role")
    list_select_related = ("agent", "decided_by")
    search_fields = ("hostname",)


@admin.register(AgentCredential)
class AgentCredentialAdmin(ReadOnlyAdmin):
    list_display = ("pk", "agent", "created", "valid_until", "revoked_at")
    list_select_related = ("agent",)
    exclude = ("credential_hash",)


@admin.register(AgentReport)
class AgentReportAdmin(ReadOnlyAdmin):
    list_display = ("agent", "seq", "received", "samples")
    list_select_related = ("agent",)


@admin.register(NodeDesiredState, NodeObservedState, FabricDesiredState, FabricObservedState)
class StateAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "updated")


@admin.register(NodeHealth)
class NodeHealthAdmin(ReadOnlyAdmin):
    list_display = ("node", "reachable", "unreachable_since", "updated")
    list_filter = ("reachable",)
    list_select_related = ("node",)


@admin.register(GpuTelemetry)
class GpuTelemetryAdmin(ReadOnlyAdmin):
    list_display = ("node", "index", "uuid", "ts", "healthy", "lost", "last_xid")
    list_select_related = ("node",)


@admin.register(PortTelemetry)
class PortTelemetryAdmin(ReadOnlyAdmin):
    list_display = ("node", "device", "port", "port_guid", "ts", "state_id", "phys_state_id")
    list_select_related = ("node",)


@admin.register(TelemetrySample)
class TelemetrySampleAdmin(ReadOnlyAdmin):
    list_display = ("node", "kind", "key", "minute")
    list_filter = ("kind",)
    list_select_related = ("node",)


@admin.register(TenantPartition)
class TenantPartitionAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "pkey_hex", "state", "created", "released_at")
    list_filter = ("state",)
    list_select_related = ("tenant",)


@admin.register(ServiceEvent)
class ServiceEventAdmin(ReadOnlyAdmin):
    """The service lifecycle's transitions (Console → Repair is where operators act)."""

    list_display = ("created", "node", "gpu", "from_state", "to_state", "rule", "actor")
    list_filter = ("to_state", "rule")
    search_fields = ("node__hostname", "cause")


@admin.register(NodeValidation)
class NodeValidationAdmin(ReadOnlyAdmin):
    list_display = ("request_id", "node", "level", "requested_at", "finished_at", "passed")
    list_filter = ("passed", "level")
    search_fields = ("node__hostname", "request_id")
