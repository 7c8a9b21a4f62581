"""Node health: a report's signals through the health policy (``verdicts``: a fenced
GPU or node goes to repair, a warning raises an alert), IB link and error-counter alerts,
and the heartbeat timeout (silence → the ``agent_silent`` row: the node goes to repair,
and is validated when it reports again).

``NodeHealth`` is written only when something changes, so a healthy report costs nothing
here. ``Node.state`` is staff's; the service lifecycle (``portal.fleet.lifecycle``) is what
takes hardware out of leases and brings it back proven.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from portal.core import clock
from portal.core.services import audit_record
from portal.fleet import intervals
from portal.fleet.models import NodeHealth
from portal.fleet.policy import Action
from portal.fleet.services import faults, verdicts
from portal.inventory.models import Gpu, Node

LOST, QUARANTINED = Gpu.Health.LOST, Gpu.Health.QUARANTINED
RANK = {Gpu.Health.HEALTHY: 0, Gpu.Health.DEGRADED: 1, QUARANTINED: 2, LOST: 3}
ERROR_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors")


def _alert(key: str, kind: str, severity: str, message: str) -> dict[str, Any]:
    return {"key": key, "kind": kind, "severity": severity, "message": message,
            "since": clock.now().isoformat()}


def _locked_health(node: Node) -> NodeHealth:
    NodeHealth.objects.get_or_create(node=node)
    return NodeHealth.objects.select_for_update().get(node=node)


def _merge(node: Node, add: list[dict[str, Any]], drop: set[str] | None = None) -> None:
    row = _locked_health(node)
    alerts = {a["key"]: a for a in row.alerts if a["key"] not in (drop or set())}
    for alert in add:
        old = alerts.get(alert["key"])
        alerts[alert["key"]] = {**alert, "since": old["since"]} if old else alert
    merged = sorted(alerts.values(), key=lambda a: a["key"])
    if merged != row.alerts:
        row.alerts = merged
        row.save(update_fields=["alerts", "updated"])


def is_reachable(node: Node) -> bool:
    """The node's health row says reachable (a node without one is not, yet)."""
    try:
        return bool(node.health.reachable)
    except NodeHealth.DoesNotExist:
        return False


def heartbeat(*, node: Node, now: datetime) -> None:
    """A report arrived: an unreachable node becomes reachable again."""
    if is_reachable(node):
        return
    row = _locked_health(node)
    if not row.reachable or row.unreachable_since is not None:
        row.reachable, row.unreachable_since = True, None
        row.alerts = [a for a in row.alerts if a["key"] != "unreachable"]
        row.save(update_fields=["reachable", "unreachable_since", "alerts", "updated"])
        audit_record(actor=None, action="fleet.node_reachable", obj=node)
        faults.node_back(node=node)


@transaction.atomic
def health_sweep() -> int:
    """Flag enrolled nodes without a report for ``intervals.current().unreachable_after_s``
    (``GPUPOOL_AGENT_UNREACHABLE_AFTER_S``, or 3 missed reports at the fleet's interval)."""
    after = intervals.current().unreachable_after_s
    cutoff = clock.now() - timedelta(seconds=after)
    stale = (Node.objects.filter(agent__enrolled_at__isnull=False)
             .filter(Q(last_heartbeat__lt=cutoff)
                     | Q(last_heartbeat__isnull=True, agent__enrolled_at__lt=cutoff))
             .exclude(health__reachable=False))
    count = 0
    for node in stale:
        row = _locked_health(node)
        row.reachable, row.unreachable_since = False, clock.now()
        row.alerts = [a for a in row.alerts if a["key"] != "unreachable"] + [_alert(
            "unreachable", "node", "critical",
            f"no report since {node.last_heartbeat or 'enrolment'}; fenced out of its "
            "leases and sent to repair")]
        row.save(update_fields=["reachable", "unreachable_since", "alerts", "updated"])
        audit_record(actor=None, action="fleet.node_unreachable", obj=node,
                     changes={"last_heartbeat": str(node.last_heartbeat)})
        faults.silent(node=node, now=clock.now())
        count += 1
    return count


def gpu_quarantine(*, node: Node, index: int | None, uuid: str, health: str,
                   reason: str) -> Gpu | None:
    """Escalate a GPU's health (never lowers it: staff clear it) and raise an alert."""
    gpus = Gpu.objects.select_for_update().filter(node=node)
    gpu = (gpus.filter(index=index) if index is not None else gpus.filter(uuid=uuid)).first()
    if gpu is None:
        return None
    if RANK[health] > RANK[Gpu.Health(gpu.health)]:
        before, gpu.health = gpu.health, health
        gpu.save(update_fields=["health"])
        audit_record(actor=None, action="fleet.gpu_quarantine", obj=gpu,
                     changes={"health": [before, health], "reason": reason})
    _merge(node, [_alert(f"gpu:{gpu.index}", "gpu", "critical",
                         f"GPU {gpu.index} ({gpu.uuid}) {health}: {reason}")])
    return gpu


def _link_alerts(port: dict[str, Any]) -> dict[str, dict[str, Any]]:
    dev, num = port.get("device"), port.get("port")
    out = {}
    state, phys = port.get("state_id"), port.get("phys_state_id")
    if state not in (None, 4) or phys not in (None, 5):
        out[f"port:{dev}:{num}:link"] = _alert(
            f"port:{dev}:{num}:link", "port", "warning",
            f"{dev} port {num} is {port.get('state', state)}/{port.get('phys_state', phys)}")
    sat = sorted(set(port.get("saturated") or []) & set(ERROR_COUNTERS))
    if sat:
        out[f"port:{dev}:{num}:saturated"] = _alert(
            f"port:{dev}:{num}:saturated", "port", "warning",
            f"{dev} port {num} error counters saturated: {', '.join(sat)}")
    return out


def _error_increase(key: tuple[str, int], port: dict[str, Any],
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
    if prev is None:
        return None
    now, then = port.get("counters") or {}, (prev.get("data") or {}).get("counters") or {}
    grew = [f"{c} +{now[c] - then[c]}" for c in ERROR_COUNTERS
            if isinstance(now.get(c), int) and isinstance(then.get(c), int) and now[c] > then[c]]
    if not grew:
        return None
    return _alert(f"port:{key[0]}:{key[1]}:errors", "port", "warning",
                  f"{key[0]} port {key[1]} errors: {', '.join(grew)}")


Changes = tuple[list[dict[str, Any]], set[str]]


def _changes(gpus: dict[int, dict[str, Any]], prev_gpus: dict[int, dict[str, Any]],
             ports: dict[tuple[str, int], dict[str, Any]],
             prev_ports: dict[tuple[str, int], dict[str, Any]],
             xid_events: list[dict[str, Any]]) -> Changes:
    """The port alerts to add and the alert keys to drop (no database work); what GPUs and
    ports *do* to the lifecycle is the health policy's (``verdicts``)."""
    add: list[dict[str, Any]] = []
    drop: set[str] = set()
    for key, port in ports.items():
        prev = prev_ports.get(key)
        now_alerts = _link_alerts(port)
        before = _link_alerts(prev["data"]) if prev else {}
        if now_alerts.keys() != before.keys():
            add += now_alerts.values()
            drop |= set(before) - set(now_alerts)
        if (grew := _error_increase(key, port, prev)) is not None:
            add.append(grew)
    return add, drop


def would_change(*, gpus: dict[int, dict[str, Any]], prev_gpus: dict[int, dict[str, Any]],
                 ports: dict[tuple[str, int], dict[str, Any]],
                 prev_ports: dict[tuple[str, int], dict[str, Any]],
                 xid_events: list[dict[str, Any]]) -> bool:
    """``evaluate`` with these arguments would write something (no database work)."""
    return any(_changes(gpus, prev_gpus, ports, prev_ports, xid_events)) or bool(
        verdicts.judge(hostname="", gpus=gpus, prev_gpus=prev_gpus, ports=ports,
                       prev_ports=prev_ports, xid_events=xid_events))


def evaluate(*, node: Node, gpus: dict[int, dict[str, Any]],
             prev_gpus: dict[int, dict[str, Any]], ports: dict[tuple[str, int], dict[str, Any]],
             prev_ports: dict[tuple[str, int], dict[str, Any]],
             xid_events: list[dict[str, Any]]) -> None:
    add, drop = _changes(gpus, prev_gpus, ports, prev_ports, xid_events)
    judged = verdicts.judge(hostname=node.hostname, gpus=gpus, prev_gpus=prev_gpus,
                            ports=ports, prev_ports=prev_ports, xid_events=xid_events)
    for signal, verdict in judged:  # the GPU's symptom, with its alert
        if verdict.fence and signal.gpu_index is not None:
            symptom = LOST if verdict.action is Action.REBOOT_NODE else QUARANTINED
            gpu_quarantine(node=node, index=signal.gpu_index, uuid=signal.gpu_uuid or "",
                           health=symptom, reason=verdict.cause)
    gpus_here = ({g.index: g for g in Gpu.objects.filter(node=node)}
                 if any(s.gpu_index is not None for s, _ in judged) else {})
    add = add + verdicts.apply(node=node, judged=judged, gpu_by_index=gpus_here)
    if add or drop:
        _merge(node, add, drop)


@transaction.atomic
def node_alert_clear(*, actor: Any, node: Node, key: str) -> None:
    """Staff acknowledge an alert (e.g. a counter increase) and remove it."""
    row = _locked_health(node)
    row.alerts = [a for a in row.alerts if a["key"] != key]
    row.save(update_fields=["alerts", "updated"])
    audit_record(actor=actor, action="fleet.node_alert_clear", obj=node, changes={"key": key})
