"""Verdicts become lifecycle transitions: a failed GPU or node goes to repair (and so out
of every running lease, ``lifecycle.transition``); a node back from silence is validated.

The health policy decides *whether* a signal is a fault and of what (``health``); this
module is the one place that turns its verdict into the service lifecycle.
"""

from __future__ import annotations

from datetime import datetime

from portal.core.services import audit_record
from portal.fleet import lifecycle
from portal.fleet.models import ServiceEvent
from portal.fleet.services import validation
from portal.inventory.models import Gpu, Node, Service

SILENT = "agent_silent"


def stale(part: Node | Gpu, at: datetime | None, cause: str) -> bool:
    """An event from before the part's last return to service (a report replayed after an
    agent restart, a spooled report arriving late) is not a new fault: ignored, audited.
    The NVSentinel failure mode of a stale event rebooting a healthy node."""
    since = part.service_since
    if at is None or since is None or part.service != Service.IN_SERVICE or at >= since:
        return False
    audit_record(actor=None, action="fleet.stale_event_ignored", obj=part,
                 changes={"cause": cause, "event_at": at.isoformat(),
                          "in_service_since": since.isoformat()})
    return True


def gpu_failed(*, gpu: Gpu, cause: str, rule: str, at: datetime | None = None) -> bool:
    """The GPU leaves service (and its leases); False when it already had, or when the
    event is older than its return to service."""
    if stale(gpu, at, cause):
        return False
    return lifecycle.send_to_repair(gpu, cause=cause, rule=rule, at=at)


def node_failed(*, node: Node, cause: str, rule: str, at: datetime | None = None) -> bool:
    """The whole node leaves service (and every lease on it); False when it already had."""
    if stale(node, at, cause):
        return False
    return lifecycle.send_to_repair(node, cause=cause, rule=rule, at=at)


def node_back(*, node: Node) -> bool:
    """A node sent to repair for silence reports again: prove it before it returns (the
    failure mode of a node left cordoned after the fault cleared)."""
    node = lifecycle.lock_node(node)
    if node.service != Service.OUT_OF_SERVICE:
        return False
    last = ServiceEvent.objects.filter(node=node, gpu=None,
                                       to_state=Service.OUT_OF_SERVICE).last()
    if last is None or last.rule != SILENT:
        return False
    validation.validate(part=node, reason="the agent reports again after its silence")
    return True
