"""gpupool scheduling core: pure, deterministic GPU placement (stdlib only).

Build a :class:`Snapshot`, call :func:`schedule_pass` (or :func:`quote`,
:func:`check_extension`) and write the returned decisions back. See docs/scheduler.md.
"""

from scheduler.decisions import (
    Decision,
    ExtensionResult,
    PassResult,
    Placement,
    Quote,
    Reason,
    Unplaceable,
)
from scheduler.engine import queue_order, quote, schedule_pass
from scheduler.feasibility import Limit, NeverFits, never_fits
from scheduler.model import (
    MILLI,
    FairShareConfig,
    Gpu,
    Lease,
    Locality,
    LocalityLevel,
    Node,
    NodeAllocation,
    NodeState,
    PriorityClass,
    Request,
    Snapshot,
    TaskType,
    TenantQuota,
    Topology,
    UsageRecord,
)
from scheduler.policy import DEFAULT_POLICY, POLICIES, get_policy
from scheduler.warm import WarmBase
from scheduler.windows import check_extension

__all__ = [
    "DEFAULT_POLICY",
    "MILLI",
    "POLICIES",
    "Decision",
    "ExtensionResult",
    "FairShareConfig",
    "Gpu",
    "Lease",
    "Limit",
    "Locality",
    "LocalityLevel",
    "NeverFits",
    "Node",
    "NodeAllocation",
    "NodeState",
    "PassResult",
    "Placement",
    "PriorityClass",
    "Quote",
    "Reason",
    "Request",
    "Snapshot",
    "TaskType",
    "TenantQuota",
    "Topology",
    "Unplaceable",
    "UsageRecord",
    "WarmBase",
    "check_extension",
    "get_policy",
    "never_fits",
    "queue_order",
    "quote",
    "schedule_pass",
]
