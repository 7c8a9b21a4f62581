"""Placing MIG orders (ADR 0222): in the single-flight pass, after the other orders, the
core's MIG placer (through ``portal.leasing.allocation``) picks a GPU and a valid start
slot per instance; the instances' memory slices are written as allocation slots (the
exclusion constraint refuses any overlap, whatever races) with one ``MigInstance`` each."""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction

from portal.inventory.models import Gpu
from portal.leasing import allocation, desired, notify, states
from portal.leasing.lifecycle import preemption, provisioning, timing
from portal.leasing.models import Allocation, Lease, MigInstance
from portal.leasing.models import LeaseState as S
from portal.leasing.quotas import gpus_held, quota_for

log = logging.getLogger(__name__)


def place_queue(queue: list[Lease], now: datetime) -> int:
    """Place what fits now; the rest waits with the placer's reason. Returns how many."""
    if not queue:
        return 0
    decisions = allocation.schedule_mig(queue, now)
    placed = 0
    waiting = []
    for lease in queue:
        decision = decisions[str(lease.pk)]
        if isinstance(decision, allocation.MigWait):
            waiting.append((lease, decision.value))
        else:
            placed += _try(lease, decision, now)
    for lease, reason in waiting:  # on the pool as the placed ones left it
        preempting = allocation.mig_preempting(lease, now)
        if preempting is None:
            _wait(lease, reason)
        else:
            placed += _try(lease, preempting[0], now, victims=preempting[1])
    return placed


def _wait(lease: Lease, reason: str) -> None:
    if lease.wait_reason != reason or lease.earliest_start is not None:
        lease.wait_reason, lease.earliest_start = reason, None
        lease.save(update_fields=["wait_reason", "earliest_start", "updated"])


def _try(lease: Lease, picks: tuple[allocation.MigPick, ...], now: datetime,
         victims: tuple[str, ...] = ()) -> int:
    """Write the instances (spot ``victims`` preempted first, ADR 0241): the lease starts
    at its start, or after the running victims' notice."""
    # a future start is kept (the instance is reserved, ADR 0241); a past one starts now
    start = max(now, lease.start_at)
    model = picks[0].model
    try:
        with transaction.atomic():
            grace = timing.preempt_grace()
            noticed = preemption.running(victims) if grace else ()
            if noticed:
                start = max(start, now + grace)
            end = start + (lease.end_at - lease.start_at)
            quota = quota_for(lease.tenant, model)
            if quota is not None and (gpus_held(lease.tenant, model, start, end)
                                      + Decimal(str(lease.total_gpus)) > quota.max_gpus):
                _wait(lease, "quota")
                return 0
            if noticed:  # running spot leases get their notice; this one starts after it
                preemption.give_notice(victims, by=lease, until=start)
            elif victims:
                preemption.preempt(victims, by=lease, at=start)
            write_instances(lease, picks, start, end)
            desired.ensure_partition(lease.tenant)
            lease.start_at, lease.end_at, lease.gpu_model = start, end, model
            lease.wait_reason, lease.earliest_start = "", None
            fields = ("start_at", "end_at", "gpu_model", "wait_reason", "earliest_start")
            data: dict[str, object] = {
                "mig": [[p.node, p.index, p.profile, p.start] for p in picks], "model": model}
            if start > now:  # reserved: provisioning begins at its start (reconciler)
                states.transition(lease, S.SCHEDULED, reason="reserved for a later start",
                                  data=data, fields=fields)
            else:
                provisioning.start(lease, now, fields=fields, data=data)
            notify.lease_changed(lease)
            return 1
    except IntegrityError as exc:
        log.warning("MIG placement of %s lost a race (%s); it stays queued", lease.pk, exc)
        return 0


def write_instances(lease: Lease, picks: tuple[allocation.MigPick, ...], start: datetime,
                    end: datetime) -> None:
    """The picked instances' memory slices as allocation slots, one ``MigInstance`` each
    (placing, and healing's replacements)."""
    gpus = {(g.node.hostname, g.index): g for g in Gpu.objects.select_related("node").filter(
        node__hostname__in={p.node for p in picks})}
    for pick in picks:
        gpu = gpus[(pick.node, pick.index)]
        size = allocation.mig_slices(pick.model, pick.profile)
        rows = Allocation.objects.bulk_create(
            Allocation(lease=lease, gpu=gpu, node_id=gpu.node_id, slot=slot, start_at=start,
                       end_at=end, mig=True) for slot in range(pick.start, pick.start + size))
        MigInstance.objects.create(lease=lease, allocation=rows[0], gpu=gpu,
                                   profile=pick.profile, start=pick.start, size=size)
