"""The one way to change where a node or a GPU stands in service: an explicit transition
table, like the lease's (house rule 4), every transition audited with its cause.

    in service → suspect → out of service (repair, with cause) → validating → in service

- ``suspect``: not offered to new leases; running leases keep it (an operator's cordon,
  a warning-level signal).
- ``out_of_service``: fenced out of every running lease at once (``hooks.parts_failed``:
  leasing removes it from the grants and the tenant's partition and finds a replacement);
  never offered until it has been validated.
- ``validating``: the node's agent runs its checks (``validation``); passed → in service
  (unless it flaps: then an operator returns it), failed → back to repair.

Only ``in_service`` hardware is offered (``portal.leasing.allocation`` reads it). Diagram
and the console's repair queue: docs/fleet.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.errors import Conflict
from portal.core.services import audit_record
from portal.fleet import hooks
from portal.fleet.models import ServiceEvent
from portal.fleet.policy.loader import effective_table
from portal.inventory.models import Gpu, Node, Service

ALLOWED: dict[str, frozenset[str]] = {
    Service.IN_SERVICE: frozenset({Service.SUSPECT, Service.OUT_OF_SERVICE}),
    Service.SUSPECT: frozenset({Service.IN_SERVICE, Service.OUT_OF_SERVICE}),
    Service.OUT_OF_SERVICE: frozenset({Service.VALIDATING}),
    Service.VALIDATING: frozenset({Service.IN_SERVICE, Service.OUT_OF_SERVICE}),
}
OFFERED = frozenset({Service.IN_SERVICE})
# Still granted to the leases that hold it (suspect: cordoned, not fenced).
KEPT_BY_LEASES = frozenset({Service.IN_SERVICE, Service.SUSPECT})


class IllegalServiceTransition(Conflict):
    code = "illegal_service_transition"


Part = Node | Gpu


def _node_of(part: Part) -> Node:
    return part if isinstance(part, Node) else part.node


def _check(part: Part, to: str) -> None:
    if to not in ALLOWED[part.service]:
        names = {"from": Service(part.service).label.lower(), "to": Service(to).label.lower()}
        raise IllegalServiceTransition(
            _("Hardware cannot go from %(from)s to %(to)s.") % names,
            fields={"service": [_("%(from)s → %(to)s is not allowed") % names]})


def transition(part: Part, to: str, *, cause: str, actor: Any = None, rule: str = "",
               at: datetime | None = None) -> ServiceEvent:
    """Move ``part`` (locked by the caller) to ``to``; record and audit it. Going out of
    service fences it out of running leases in this transaction (``hooks.parts_failed``)."""
    _check(part, to)
    before, now = part.service, clock.now()
    part.service, part.service_cause, part.service_since = to, cause[:300], now
    part.save(update_fields=["service", "service_cause", "service_since"])
    node = _node_of(part)
    who = getattr(actor, "username", "") or (actor if isinstance(actor, str) else "system")
    event = ServiceEvent.objects.create(
        node=node, gpu=part if isinstance(part, Gpu) else None, from_state=before,
        to_state=to, cause=cause[:300], rule=rule[:64], actor=str(who)[:150])
    audit_record(actor=actor if not isinstance(actor, str) else None,
                 action=f"fleet.service.{to}", obj=part,
                 changes={"service": [before, to], "cause": cause, "rule": rule})
    if to == Service.OUT_OF_SERVICE:
        indexes = [part.index] if isinstance(part, Gpu) else None
        hooks.parts_failed(node.pk, indexes, cause, at or now)
    return event


def flapping(part: Part, now: datetime | None = None) -> bool:
    """Sent to repair the policy's ``flap.max_fences`` times (3) or more within its
    ``flap.window_s`` (24 h): it stays out until an operator returns it."""
    flap = effective_table().guards.flap
    since = (now or clock.now()) - timedelta(seconds=flap.window_s)
    events = ServiceEvent.objects.filter(node=_node_of(part), to_state=Service.OUT_OF_SERVICE,
                                         created__gte=since)
    events = events.filter(gpu=part) if isinstance(part, Gpu) else events.filter(gpu=None)
    return events.count() >= flap.max_fences


def lock_node(node: Node) -> Node:
    return Node.objects.select_for_update().get(pk=node.pk)


def lock_gpu(gpu: Gpu) -> Gpu:
    return Gpu.objects.select_for_update().select_related("node").get(pk=gpu.pk)


def send_to_repair(part: Part, *, cause: str, actor: Any = None, rule: str = "",
                   at: datetime | None = None) -> bool:
    """Out of service, wherever it stands (validating or suspect included); False when it
    already is. A node's GPUs go with it."""
    part = lock_node(part) if isinstance(part, Node) else lock_gpu(part)
    if part.service == Service.OUT_OF_SERVICE:
        return False
    transition(part, Service.OUT_OF_SERVICE, cause=cause, actor=actor, rule=rule, at=at)
    return True


def mark_suspect(part: Part, *, cause: str, actor: Any = None, rule: str = "") -> bool:
    part = lock_node(part) if isinstance(part, Node) else lock_gpu(part)
    if part.service != Service.IN_SERVICE:
        return False
    transition(part, Service.SUSPECT, cause=cause, actor=actor, rule=rule)
    return True


@transaction.atomic
def repair_queue() -> list[dict[str, Any]]:
    """Nodes and GPUs not in service, oldest first, with their age (the console's queue)."""
    now = clock.now()
    out: list[dict[str, Any]] = []
    for node in Node.objects.exclude(service=Service.IN_SERVICE).order_by("service_since"):
        out.append(_queue_row(node, None, now))
    for gpu in (Gpu.objects.exclude(service=Service.IN_SERVICE).select_related("node")
                .order_by("service_since")):
        out.append(_queue_row(gpu.node, gpu, now))
    return sorted(out, key=lambda r: r["since"] or now)


def _queue_row(node: Node, gpu: Gpu | None, now: datetime) -> dict[str, Any]:
    part = gpu or node
    since = part.service_since
    return {"node": node.hostname, "node_id": node.pk, "gpu": gpu.index if gpu else None,
            "gpu_id": gpu.pk if gpu else None, "service": part.service,
            "cause": part.service_cause, "since": since,
            "age_s": int((now - since).total_seconds()) if since else None,
            "flapping": flapping(part, now)}
