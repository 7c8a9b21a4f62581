"""Placing: a single-flight scheduling pass puts queued leases on GPU slots (the core
decides through ``portal.leasing.allocation``) or records why each one waits."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from portal.core import clock, histograms
from portal.core.crash import crashpoint
from portal.inventory.models import Gpu
from portal.leasing import allocation, desired, notify, states
from portal.leasing.lifecycle import migplacing, preemption, provisioning, timing
from portal.leasing.models import LOCK_SKIP, MILLI_PER_SLOT, SLOTS_PER_GPU, Allocation, Lease
from portal.leasing.models import LeaseState as S
from portal.leasing.quotas import gpus_held, quota_for

log = logging.getLogger(__name__)

SCHEDULE_LOCK = 0x67707570  # "gpup": transaction-scoped advisory lock id
PASS_LIMIT = 500


class SlotConflict(Exception):
    pass


def single_flight(*, wait: bool = True) -> bool:
    """Serialise scheduling passes: a transaction-scoped advisory lock on PostgreSQL.
    ``wait=False`` only tries: False when another pass holds it (that pass places).

    (SQLite, the demo's database, takes its write lock at BEGIN IMMEDIATE instead.)
    """
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULE_LOCK])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [SCHEDULE_LOCK])
        return bool(cursor.fetchone()[0])


PASS_HISTOGRAM = "gpupool_schedule_pass_duration_seconds"


def run_schedule_pass(*, wait: bool = True) -> dict[str, int]:
    """Place what can be placed now; record why the rest waits. Single-flight: with
    ``wait=False`` (the reconciler's backstop) a pass already running is left to place,
    instead of holding a worker behind its lock. Each pass that found a queue is timed
    (lock wait and commit included) into ``/metrics``."""
    started = time.perf_counter()
    counts = _schedule_pass(wait)
    if counts["queued"]:
        histograms.observe(PASS_HISTOGRAM, time.perf_counter() - started)
    return counts


def _schedule_pass(wait: bool) -> dict[str, int]:
    with transaction.atomic():
        if not single_flight(wait=wait):
            return {"queued": 0, "placed": 0, "busy": 1}
        now = clock.now()
        queue = list(Lease.objects.select_for_update(**LOCK_SKIP)
                     .filter(state=S.QUEUED).select_related("tenant")
                     .order_by("-queue_boost", "created")[:PASS_LIMIT])
        if not queue:
            return {"queued": 0, "placed": 0}
        transaction.on_commit(lambda: crashpoint("schedule.after_commit"))
        plain = [lease for lease in queue if not lease.mig_profile]
        leases = {str(lease.id): lease for lease in queue}
        placed = 0
        if plain:
            result = allocation.schedule(plain, now)
            for decision in result.decisions:
                lease = leases[decision.request_id]
                if isinstance(decision, allocation.Placement):
                    placed += _try_place(lease, decision, now)
                else:
                    _note_wait(lease, decision.reason.value, decision.earliest_start)
        # MIG orders after the others, on the pool as they left it (ADR 0222).
        placed += migplacing.place_queue([lease for lease in queue if lease.mig_profile], now)
        if placed:
            crashpoint("schedule.after_allocations")
        return {"queued": len(queue), "placed": placed}


def _note_wait(lease: Lease, reason: str, earliest: int | None) -> None:
    when = allocation.from_epoch(earliest)
    if lease.wait_reason != reason or lease.earliest_start != when:
        lease.wait_reason, lease.earliest_start = reason, when
        lease.save(update_fields=["wait_reason", "earliest_start", "updated"])


def _try_place(lease: Lease, placement: allocation.Placement, now: datetime) -> int:
    try:
        with transaction.atomic():
            grace = timing.preempt_grace()
            noticed = preemption.running(placement.victims) if grace else ()
            if noticed:  # running spot leases get their notice; this lease starts after it
                placement = preemption.delayed(placement, grace)
            if not _quota_allows(lease, placement):
                _note_wait(lease, "quota", None)
                return 0
            start = _at(allocation.from_epoch(placement.start))
            if noticed:
                preemption.give_notice(placement.victims, by=lease, until=start)
            else:  # first: ends their slots
                preemption.preempt(placement.victims, by=lease, at=start)
            _write_allocations(lease, placement, ignoring=placement.victims)
            # The tenant's P_Key is allocated here, in the single-flight pass, and commits
            # with the placement: provisioning then only reads it. Allocated while pushing
            # nodes, two provisioning steps deadlocked (regression:
            # test_provisioning_does_not_allocate_partitions).
            desired.ensure_partition(lease.tenant)
            _mark_placed(lease, placement, now)
            return 1
    except (IntegrityError, SlotConflict) as exc:
        log.warning("placement of %s lost a race (%s); it stays queued", lease.pk, exc)
        return 0


def _quota_allows(lease: Lease, placement: allocation.Placement) -> bool:
    """Nova's recheck: the quota inside the allocating transaction."""
    quota = quota_for(lease.tenant, placement.model)
    if quota is None:
        return True
    start, end = allocation.from_epoch(placement.start), allocation.from_epoch(placement.end)
    assert start is not None and end is not None
    held = gpus_held(lease.tenant, placement.model, start, end)
    return held + Decimal(str(lease.total_gpus)) <= quota.max_gpus


def _at(value: datetime | None) -> datetime:
    assert value is not None
    return value


def _write_allocations(lease: Lease, placement: allocation.Placement,
                       ignoring: tuple[str, ...] = ()) -> None:
    """The placement's allocation rows, in three statements whatever its size: its GPUs,
    their slots in use over the window, one bulk insert."""
    start = _at(allocation.from_epoch(placement.start))
    end = _at(allocation.from_epoch(placement.end))
    gpus = {(g.node.hostname, g.index): g for g in Gpu.objects.select_related("node").filter(
        node__hostname__in=[part.node for part in placement.parts])}
    wanted = [(gpus[(part.node, index)], -(-milli // MILLI_PER_SLOT))
              for part in placement.parts for index, milli in part.gpus]
    used = _used_slots([gpu.pk for gpu, _ in wanted], start, end, ignoring)
    rows = [Allocation(lease=lease, gpu=gpu, node_id=gpu.node_id, slot=slot,
                       start_at=start, end_at=end)
            for gpu, count in wanted for slot in _free_slots(gpu, used[gpu.pk], count)]
    Allocation.objects.bulk_create(rows)
    lease.start_at, lease.end_at = start, end


def _used_slots(gpu_ids: list[int], start: datetime, end: datetime,
                ignoring: tuple[str, ...] = ()) -> dict[int, set[int]]:
    """Per GPU, the slots held during [start, end) (one query).

    A lease past its end but still on the hardware keeps its slots now (as in the
    snapshot: allocation._leases); a later window may follow it, fenced (``handover``).
    The victims (``ignoring``) end exactly when this one starts."""
    held = Q(end_at__gt=start)
    if start < clock.now() + timedelta(seconds=1):
        held |= Q(lease__state__in=allocation.LINGERING)
    used: dict[int, set[int]] = {pk: set() for pk in gpu_ids}
    for gpu_id, slot in (Allocation.objects.filter(gpu_id__in=gpu_ids, live=True,
                                                   start_at__lt=end).filter(held)
                         .exclude(lease_id__in=list(ignoring)).values_list("gpu_id", "slot")):
        used[gpu_id].add(slot)
    return used


def _free_slots(gpu: Gpu, used: set[int], wanted: int) -> list[int]:
    free = [s for s in range(SLOTS_PER_GPU) if s not in used]
    if len(free) < wanted:
        raise SlotConflict(f"GPU {gpu.pk} has {len(free)} free slots, {wanted} wanted")
    return free[:wanted]


def _mark_placed(lease: Lease, placement: allocation.Placement, now: datetime) -> None:
    lease.gpu_model, lease.borrowed = placement.model, placement.borrowed
    lease.wait_reason, lease.earliest_start = "", None
    data = {"nodes": list(placement.nodes), "model": placement.model,
            "score": dict(placement.score)}
    fields = ("start_at", "end_at", "gpu_model", "borrowed", "wait_reason", "earliest_start")
    if lease.start_at > now:  # never grant access before the previous holder's end
        states.transition(lease, S.SCHEDULED, reason="reserved for a later start", data=data,
                          fields=fields)
    else:
        provisioning.start(lease, now, fields=fields, data=data)
    notify.lease_changed(lease)
