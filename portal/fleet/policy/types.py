"""The policy's vocabulary: what an agent saw (``Signal``), what to do about it
(``Verdict``), a row of the table (``Rule``) and the one error a bad table raises.

Times are **float seconds since the Unix epoch (UTC)**, the agents' own ``ts``: they compare
and subtract without time-zone care and store as JSON numbers in the guards' state
(``datetime.timestamp()`` converts an aware datetime).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

SignalValue = int | float | bool | str | None


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    FATAL = "fatal"


class Action(StrEnum):
    NONE = "none"
    RESTART_APP = "restart_app"  # the tenant restarts the application; the part stays
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    DRAIN_REPLACE = "drain_replace"  # out of service, sent to repair
    RMA = "rma"  # the part goes back to the vendor
    CHECK_LINK = "check_link"  # cable / transceiver / switch port
    CHECK_NODE = "check_node"  # a person looks (cooling, power, the agent)
    CONTACT_SUPPORT = "contact_support"  # NVIDIA support: unexpected error
    UPDATE_SOFTWARE = "update_software"  # driver / firmware


class Scope(StrEnum):
    GPU = "gpu"
    NODE = "node"
    PORT = "port"


class Kind(StrEnum):
    XID = "xid"
    GPU_LOST = "gpu_lost"
    ECC_DBE = "ecc_dbe"
    REMAP_PENDING = "remap_pending"
    REMAP_FAILURE = "remap_failure"
    THERMAL = "thermal"
    POWER_BRAKE = "power_brake"
    RECOVERY_ACTION = "recovery_action"
    IB_PORT_DOWN = "ib_port_down"
    IB_PORT_UP = "ib_port_up"
    IB_LINK_DOWNED = "ib_link_downed"
    IB_SYMBOL_ERRORS = "ib_symbol_errors"
    AGENT_SILENT = "agent_silent"


class PolicyError(ValueError):
    """A policy file or row is refused: ``field`` names the key (dotted), ``message`` what
    is wrong with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Signal:
    """One thing an agent saw change. ``value``: the XID, the counter increase, the
    per-hour rate, the recovery action, the clocks bitmask, the port state…; ``at``: float
    Unix seconds (UTC) of the reading or event."""

    kind: Kind
    node: str
    value: SignalValue = None
    at: float = 0.0
    gpu_index: int | None = None
    port: tuple[str, int] | None = None
    gpu_uuid: str | None = None

    def where(self) -> str:
        """The part in words: ``GPU 3 of node-017``, ``mlx5_0 port 1 of node-017``."""
        if self.port is not None:
            return f"{self.port[0]} port {self.port[1]} of {self.node}"
        if self.gpu_index is not None:
            return f"GPU {self.gpu_index} of {self.node}"
        if self.gpu_uuid:
            return f"GPU {self.gpu_uuid} of {self.node}"
        return self.node


@dataclass(frozen=True)
class Rule:
    """A row of the policy table. ``params`` hold a row's thresholds (``per_hour``)."""

    key: str
    severity: Severity
    action: Action
    scope: Scope
    fence: bool
    cause: str
    params: Mapping[str, float] = field(default_factory=dict)
    source: str = "default"

    def as_dict(self) -> dict[str, object]:
        return {"key": self.key, "severity": str(self.severity), "action": str(self.action),
                "scope": str(self.scope), "fence": self.fence, "cause": self.cause,
                "params": dict(self.params), "source": self.source}


@dataclass(frozen=True)
class Verdict:
    """What to do: ``fence`` — the part leaves a running lease now; ``rule`` — the row key
    that decided (``xid.79``); ``cause`` — words naming the signal and the part."""

    severity: Severity
    action: Action
    scope: Scope
    fence: bool
    cause: str
    rule: str
