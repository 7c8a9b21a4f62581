"""Fleet models: agents and their credentials, desired/observed state, telemetry, health."""

from portal.fleet.models.agents import Agent, AgentCredential, AgentReport, BootstrapToken
from portal.fleet.models.enrolment import EnrolmentRequest
from portal.fleet.models.health import NodeHealth
from portal.fleet.models.service import NodeValidation, ServiceEvent
from portal.fleet.models.state import (
    FabricDesiredState,
    FabricObservedState,
    NodeDesiredState,
    NodeObservedState,
    TenantPartition,
)
from portal.fleet.models.telemetry import GpuTelemetry, PortTelemetry, TelemetrySample

__all__ = [
    "Agent", "AgentCredential", "AgentReport", "BootstrapToken", "EnrolmentRequest",
    "FabricDesiredState",
    "FabricObservedState", "GpuTelemetry", "NodeDesiredState", "NodeHealth",
    "NodeObservedState", "NodeValidation", "PortTelemetry", "ServiceEvent",
    "TelemetrySample", "TenantPartition",
]
