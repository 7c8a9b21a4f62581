"""Healing: hardware of a running lease failed — fence it at once, replace it inside the
lease, tell the tenant; where nothing can replace it, the lease runs degraded and the
tenant chooses (continue smaller, wait — ahead of new orders —, or release).

1. ``parts_failed`` (the fleet's lifecycle sent a node or GPUs to repair; in that
   transaction): each running lease's slots there stop being live and its nodes and the
   fabric are pushed without them — the failed node's ports leave the tenant's partition
   at the subnet manager, its login is revoked; a ``LeaseFault`` records what and when
   (billing stops there for those GPUs); the lease is ``healing``; ``heal`` follows.
2. ``heal``: the core finds a replacement that keeps the lease's placement promise (a
   GPU beside the others for a GPU fault; a node on the gang's leaf for a node fault),
   not counted as a new order; its slots are written and pushed through the normal
   desired-state path; the lease's other nodes are untouched. None: ``degraded``.
3. ``check_healed`` (the replacement's node converged): the fault is ``replaced``, billing
   resumes on the replacement, the lease is whole again.

Every step locks the lease and checks it is still needed; the reconciler re-drives
healing and degraded leases each beat (``heal_pending``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction

from portal.core import clock
from portal.core.services import audit_record
from portal.fleet.lifecycle import KEPT_BY_LEASES
from portal.inventory.models import Gpu, Node
from portal.leasing import allocation, migdevices, notify, states
from portal.leasing.lifecycle import (
    dispatch,
    migplacing,
    placing,
    preemption,
    pushing,
    releasing,
    timing,
)
from portal.leasing.models import (
    LOCK,
    SLOTS_PER_GPU,
    Allocation,
    Condition,
    Lease,
    LeaseEvent,
    LeaseFault,
    MigInstance,
)

log = logging.getLogger(__name__)
RUNNING = sorted(states.RUNNING)
MAX_REPAIR_TRIES = 3  # replacements that did not converge, then escalated to a person
OPEN = LeaseFault.Resolution.OPEN


def parts_failed(node_id: int, indexes: list[int] | None, cause: str,
                 fault_at: datetime) -> None:
    """Fence failed hardware out of every lease on it (``fleet.hooks.parts_failed``)."""
    rows = Allocation.objects.filter(node_id=node_id, live=True)
    if indexes is not None:
        rows = rows.filter(gpu__index__in=indexes)
    on_it = rows.values("lease_id")
    for lease in Lease.objects.select_for_update(**LOCK).filter(
            pk__in=on_it, state__in=RUNNING).order_by("created"):
        fence(lease, node_id=node_id, indexes=indexes, cause=cause, fault_at=fault_at)
    gpu_indexes = indexes if indexes is not None else list(
        Gpu.objects.filter(node_id=node_id).values_list("index", flat=True))
    releasing.gpus_quarantined(node_id, gpu_indexes)  # placed, not yet running: placed again


def fence(lease: Lease, *, node_id: int, indexes: list[int] | None, cause: str,
          fault_at: datetime) -> LeaseFault | None:
    """Take the failed slots out of the (locked) lease and push its nodes without them."""
    rows = Allocation.objects.filter(lease=lease, node_id=node_id, live=True)
    if indexes is not None:
        rows = rows.filter(gpu__index__in=indexes)
    freed = list(rows.values_list("pk", "gpu__index"))
    if not freed:
        return None
    now = clock.now()
    failed_gpus = _failed_share(lease, [pk for pk, _ in freed])
    Allocation.objects.filter(pk__in=[pk for pk, _ in freed]).update(live=False)
    pushing.fence_freed(lease, [pk for pk, _ in freed])
    start = max(min(fault_at, now), lease.active_at or now)
    fault = LeaseFault.objects.create(
        lease=lease, node_id=node_id, gpu_indexes=sorted({i for _, i in freed}),
        gpus=failed_gpus, cause=cause[:300], fault_at=start,
        fenced_at=now)
    hostname = Node.objects.values_list("hostname", flat=True).get(pk=node_id)
    _set_condition(lease, Condition.HEALING)
    event = states.record(lease, "fault", reason=f"{hostname}: {cause}"[:300], data={
        "node": hostname, "gpu_indexes": fault.gpu_indexes, "fault_at": start.isoformat(),
        "fenced_at": now.isoformat()})
    notify.healing(lease, "lease.healing", event.reason, event.data)
    dispatch.step_on_commit("heal", lease.pk)
    return fault


def _failed_share(lease: Lease, freed: list[int]) -> Decimal:
    """GPUs no longer billed: the freed slots' eighths, or for a MIG lease its failed
    instances' GPU equivalents (a ``1g.10gb`` holds one slot but bills 0.142)."""
    if not lease.mig_profile:
        return Decimal(len(freed)) / SLOTS_PER_GPU
    instances = MigInstance.objects.filter(lease=lease, allocation_id__in=freed).count()
    return Decimal(instances * (lease.gpu_milli or 0)) / 1000


def _set_condition(lease: Lease, condition: str) -> None:
    if lease.condition != condition:
        lease.condition = condition
        lease.save(update_fields=["condition", "updated"])


def open_faults(lease: Lease) -> list[LeaseFault]:
    return list(LeaseFault.objects.filter(lease=lease, resolution=OPEN,
                                          replacement={}).select_related("node"))


def heal(lease_id: object) -> None:
    """Find and apply replacements for the lease's open faults (idempotent)."""
    with transaction.atomic():
        lease = pushing.lock(lease_id)
        if lease is None or lease.state not in states.RUNNING or lease.heal_targets:
            return
        if lease.condition not in (Condition.HEALING, Condition.DEGRADED) or escalated(lease):
            return
        faults = open_faults(lease)
        if not faults:
            _set_condition(lease, Condition.HEALTHY)
            return
        placed = [f for f in faults if _replace(lease, f)]
        if placed:
            _push_repair(lease, placed)
        elif lease.condition != Condition.DEGRADED:
            _degrade(lease, faults)


def _replace(lease: Lease, fault: LeaseFault) -> bool:
    """Write the replacement's slots for one fault; False when nothing fits now."""
    now = clock.now()
    if lease.mig_profile:
        return _replace_mig(lease, fault, now)
    placement = _find(lease, fault, now)
    if placement is None:
        return False
    try:
        with transaction.atomic():
            if placement.victims:  # spot work gives way to a paying lease's repair
                preemption.preempt(placement.victims, by=lease, at=now)
            _write(lease, placement, now)
    except (IntegrityError, placing.SlotConflict) as exc:
        log.warning("repair of %s lost a race (%s); retried", lease.pk, exc)
        return False
    part = placement.parts[0]
    fault.replacement = {"node": part.node, "gpu_indexes": [i for i, _ in part.gpus]}
    fault.save(update_fields=["replacement"])
    return True


def _replace_mig(lease: Lease, fault: LeaseFault, now: datetime) -> bool:
    """New instances for the MIG instances a fault took (issue 28): beside the lease's
    others for a GPU fault; on one other node for a node fault (the instances of an order
    are all on one node, so the fault took them all and they stay together). False when
    none is free now, even with spot instances preempted."""
    count = MigInstance.objects.filter(lease=lease, gpu__node_id=fault.node_id,
                                       gpu__index__in=fault.gpu_indexes,
                                       allocation__live=False,
                                       allocation__start_at__lte=fault.fenced_at).count()
    gpu_fault = fault.node.service in KEPT_BY_LEASES
    found = allocation.mig_replacement(
        lease, count=count, node=fault.node.hostname if gpu_fault else None,
        exclude=frozenset() if gpu_fault else frozenset({fault.node.hostname}), now=now)
    if not count or found is None:
        return False
    picks, victims = found
    try:
        with transaction.atomic():
            if victims:  # spot instances give way to a paying lease's repair
                preemption.preempt(victims, by=lease, at=now)
            migplacing.write_instances(lease, picks, now, lease.end_at)
    except IntegrityError as exc:
        log.warning("MIG repair of %s lost a race (%s); retried", lease.pk, exc)
        return False
    fault.replacement = {"node": picks[0].node,
                         "gpu_indexes": sorted({p.index for p in picks}),
                         "mig": [[p.index, p.profile, p.start] for p in picks]}
    fault.save(update_fields=["replacement"])
    return True


def _find(lease: Lease, fault: LeaseFault, now: datetime) -> Any:
    count = len(fault.gpu_indexes)
    node_in_service = fault.node.service in KEPT_BY_LEASES
    if node_in_service:  # a GPU fault: a healthy GPU beside the lease's others
        return allocation.replacement(lease, count=count, same_node=fault.node.hostname,
                                      leaves=None, exclude=frozenset(), now=now)
    hosts = set(Allocation.objects.filter(lease=lease).values_list("node__hostname",
                                                                   flat=True))
    live = set(Allocation.objects.filter(lease=lease, live=True)
               .values_list("node__hostname", flat=True))
    leaves = _promised_leaves(lease, live or {fault.node.hostname})
    return allocation.replacement(lease, count=count, same_node=None, leaves=leaves,
                                  exclude=frozenset(hosts), now=now)


def _promised_leaves(lease: Lease, hostnames: set[str]) -> frozenset[str] | None:
    """A leaf-placed lease keeps its leaf (that of its remaining nodes)."""
    if lease.locality not in ("leaf", "nvlink", "node") and not (
            lease.nodes > 1 and lease.locality_required):
        return None
    return allocation.lease_leaves(hostnames) or None


def _write(lease: Lease, placement: allocation.Placement, now: datetime) -> None:
    gpus = {(g.node.hostname, g.index): g for g in Gpu.objects.select_related("node").filter(
        node__hostname__in=[p.node for p in placement.parts])}
    wanted = [(gpus[(p.node, index)], -(-milli // (1000 // SLOTS_PER_GPU)))
              for p in placement.parts for index, milli in p.gpus]
    used = placing._used_slots([g.pk for g, _ in wanted], now, lease.end_at,
                               placement.victims)
    Allocation.objects.bulk_create([
        Allocation(lease=lease, gpu=gpu, node_id=gpu.node_id, slot=slot, start_at=now,
                   end_at=lease.end_at)
        for gpu, count in wanted for slot in placing._free_slots(gpu, used[gpu.pk], count)])


def _push_repair(lease: Lease, placed: list[LeaseFault]) -> None:
    lease.heal_targets = pushing.push(lease)
    lease.heal_deadline = clock.now() + timing.provision_timeout()
    lease.condition = Condition.HEALING
    lease.save(update_fields=["heal_targets", "heal_deadline", "condition", "updated"])
    for fault in placed:
        words = (f"{fault.node.hostname} GPUs {fault.gpu_indexes} replaced by "
                 f"{fault.replacement['node']} GPUs {fault.replacement['gpu_indexes']}")
        states.record(lease, "repair", reason=words, data={
            "failed": {"node": fault.node.hostname, "gpu_indexes": fault.gpu_indexes},
            "replacement": fault.replacement, "cause": fault.cause})


def _degrade(lease: Lease, faults: list[LeaseFault]) -> None:
    _set_condition(lease, Condition.DEGRADED)
    failed = [{"node": f.node.hostname, "gpu_indexes": f.gpu_indexes} for f in faults]
    event = states.record(lease, "degraded", reason="no replacement free now: the lease "
                          "runs smaller; continue, wait for a replacement, or release",
                          data={"failed": failed})
    notify.healing(lease, "lease.degraded", event.reason, event.data)


def check_healed(lease_id: object) -> None:
    """The repair's nodes converged: the faults are replaced, billing resumes there."""
    with transaction.atomic():
        lease = pushing.lock(lease_id)
        if lease is None or not lease.heal_targets:
            return
        if lease.state not in states.RUNNING:
            _clear_targets(lease)
            return
        if pushing.converged(lease.heal_targets) and migdevices.ready(lease):
            _healed(lease)
        elif lease.heal_deadline and clock.now() > lease.heal_deadline:
            _repair_timed_out(lease)


def escalated(lease: Lease) -> bool:
    """Replacements that did not converge ``MAX_REPAIR_TRIES`` times: no more automatic
    tries (a stuck remediation is a person's to look at)."""
    return LeaseEvent.objects.filter(lease=lease, kind="repair_timeout").count() \
        >= MAX_REPAIR_TRIES


def _clear_targets(lease: Lease) -> None:
    lease.heal_targets, lease.heal_deadline = {}, None
    lease.save(update_fields=["heal_targets", "heal_deadline", "updated"])


def _healed(lease: Lease) -> None:
    now = clock.now()
    done = list(LeaseFault.objects.filter(lease=lease, resolution=OPEN, replaced_at=None)
                .exclude(replacement={}).select_related("node"))
    for fault in done:
        fault.replaced_at, fault.resolution, fault.resolved_at = (
            now, LeaseFault.Resolution.REPLACED, now)
        fault.save(update_fields=["replaced_at", "resolution", "resolved_at"])
    _clear_targets(lease)
    still_open = LeaseFault.objects.filter(lease=lease, resolution=OPEN).exists()
    _set_condition(lease, Condition.HEALING if still_open else Condition.HEALTHY)
    replaced = [{"failed": {"node": f.node.hostname, "gpu_indexes": f.gpu_indexes},
                 "replacement": f.replacement, "fault_at": f.fault_at.isoformat(),
                 "replaced_at": now.isoformat()} for f in done]
    words = "; ".join(f"{r['failed']['node']} → {r['replacement']['node']}" for r in replaced)
    event = states.record(lease, "healed", reason=f"replacement active: {words}"[:300],
                          data={"replaced": replaced})
    notify.healing(lease, "lease.healed", event.reason, event.data)
    if still_open:
        dispatch.step_on_commit("heal", lease.pk)


def _repair_timed_out(lease: Lease) -> None:
    """The replacement did not converge: give its slots back and look again."""
    faults = LeaseFault.objects.filter(lease=lease, resolution=OPEN, replaced_at=None) \
        .exclude(replacement={})
    for fault in faults:
        node = fault.replacement.get("node")
        Allocation.objects.filter(lease=lease, live=True, node__hostname=node,
                                  gpu__index__in=fault.replacement.get("gpu_indexes", []),
                                  start_at__gte=fault.fenced_at).update(live=False)
        fault.replacement = {}
        fault.save(update_fields=["replacement"])
    _clear_targets(lease)
    pushing.push_nodes_of(lease)
    states.record(lease, "repair_timeout", reason="the replacement did not converge in time")
    if escalated(lease):  # capped: a person looks, the tenant chooses meanwhile
        _degrade(lease, open_faults(lease))
        audit_record(actor=None, action="lease.repair_escalated", obj=lease,
                     changes={"tries": MAX_REPAIR_TRIES})
        return
    dispatch.step_on_commit("heal", lease.pk)


def heal_pending() -> int:
    """Reconciler: re-drive healing and degraded leases (a lost message only delays it),
    before the scheduling pass, so a waiting repair goes ahead of new orders."""
    ids = list(Lease.objects.filter(state__in=RUNNING, condition__in=[
        Condition.HEALING, Condition.DEGRADED]).values_list("pk", flat=True))
    for lease_id in ids:
        check_healed(lease_id)
        heal(lease_id)
    return len(ids)
