"""Verdicts become lifecycle transitions: a failed GPU or node goes to repair (and so out
of every running lease, ``lifecycle.transition``); a node back from silence is validated.

The health policy decides *whether* a signal is a fault and of what (``health``); this
module is the one place that turns its verdict into the service lifecycle.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from portal.core import clock
from portal.core.services import audit_record
from portal.fleet import lifecycle
from portal.fleet.models import ServiceEvent
from portal.fleet.policy import agent_silent, classify
from portal.fleet.policy.loader import effective_table
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
    """The whole node leaves service (and every lease on it); False when it already had,
    for a stale event, or while the circuit breaker holds automatic fencing (the node is
    then cordoned and a person told)."""
    if stale(node, at, cause):
        return False
    if node.service == Service.IN_SERVICE and breaker_open(node, cause):
        return False
    return lifecycle.send_to_repair(node, cause=cause, rule=rule, at=at)


def breaker_open(node: Node, cause: str) -> bool:
    """Would fencing this node make more than the policy's share of the fleet go out of
    service within its window? A bad rule or a facility event is not 40 % of nodes failing:
    the node is cordoned (suspect) instead, and the trip is audited for a person."""
    breaker = effective_table().guards.breaker
    since = clock.now() - timedelta(seconds=breaker.window_s)
    recent = (ServiceEvent.objects.filter(gpu=None, to_state=Service.OUT_OF_SERVICE,
                                          created__gte=since)
              .exclude(rule="operator").values("node").distinct().count()) + 1
    fleet = Node.objects.count()
    if recent < breaker.min_nodes or recent <= breaker.max_share * max(fleet, 1):
        return False
    lifecycle.mark_suspect(node, cause=f"circuit breaker held: {cause}"[:300],
                           rule="circuit_breaker")
    audit_record(actor=None, action="fleet.circuit_open", obj=node, changes={
        "cause": cause, "nodes_out_in_window": recent, "fleet": fleet,
        "alert": f"{recent} of {fleet} nodes would be out of service within "
                 f"{breaker.window_s / 60:g} min: automatic fencing held, a person decides"})
    return True


def silent(*, node: Node, now: datetime) -> bool:
    """The health sweep found the node's agent silent: the policy's ``agent_silent`` row
    decides (default: fence and send to repair)."""
    signal = agent_silent(node.hostname, node.last_heartbeat, now)
    verdict = classify(signal, effective_table())
    if verdict is None or not verdict.fence:
        return False
    return node_failed(node=node, rule=verdict.rule, at=node.last_heartbeat,
                       cause=f"agent silent since {node.last_heartbeat or 'enrolment'}")


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
    if not validation.agent_can_validate(node):  # an agent of the previous release
        cause = validation.too_old_message(node)[:300]
        if node.service_cause != cause:
            node.service_cause = cause
            node.save(update_fields=["service_cause"])
        return False
    validation.validate(part=node, reason="the agent reports again after its silence")
    return True
