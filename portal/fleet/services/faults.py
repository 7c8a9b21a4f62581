"""Verdicts become lifecycle transitions: a failed GPU or node goes to repair (and so out
of every running lease, ``lifecycle.transition``); a node back from silence is validated.

The health policy decides *whether* a signal is a fault and of what (``health``); this
module is the one place that turns its verdict into the service lifecycle.
"""

from __future__ import annotations

from datetime import datetime

from portal.fleet import lifecycle
from portal.fleet.models import ServiceEvent
from portal.fleet.services import validation
from portal.inventory.models import Gpu, Node, Service

SILENT = "agent_silent"


def gpu_failed(*, gpu: Gpu, cause: str, rule: str, at: datetime | None = None) -> bool:
    """The GPU leaves service (and its leases); False when it already had."""
    return lifecycle.send_to_repair(gpu, cause=cause, rule=rule, at=at)


def node_failed(*, node: Node, cause: str, rule: str, at: datetime | None = None) -> bool:
    """The whole node leaves service (and every lease on it); False when it already had."""
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
