"""The lease lifecycle after an order: place, provision, activate, release, expire.

Every step is one transaction on locked rows that first checks whether it is still needed,
so Celery's at-least-once delivery, a killed worker or a lost Redis only delay a step; the
reconciler (``reconcile``) finds anything in a transitional state and drives it again.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.crash import crashpoint
from portal.fleet import selectors as fleet_selectors
from portal.fleet.services.health import gpu_quarantine
from portal.inventory.models import Gpu
from portal.leasing import allocation, desired, handover, notify, states
from portal.leasing.models import (
    LOCK,
    LOCK_SKIP,
    MILLI_PER_SLOT,
    SLOTS_PER_GPU,
    Allocation,
    Lease,
)
from portal.leasing.models import LeaseState as S
from portal.leasing.quotas import gpus_held, quota_for

log = logging.getLogger(__name__)

SCHEDULE_LOCK = 0x67707570  # "gpup": transaction-scoped advisory lock id
PASS_LIMIT = 500


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def provision_timeout() -> timedelta:
    return timedelta(seconds=_setting("GPUPOOL_PROVISION_TIMEOUT_S", 120))


def release_timeout() -> timedelta:
    return timedelta(seconds=_setting("GPUPOOL_RELEASE_TIMEOUT_S", 300))


MAX_PROVISION_ATTEMPTS = 2


def single_flight() -> None:
    """Serialise scheduling passes: a transaction-scoped advisory lock on PostgreSQL.

    (SQLite, the demo's database, takes its write lock at BEGIN IMMEDIATE instead.)
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULE_LOCK])


def after_commit_schedule() -> None:
    from portal.leasing import tasks

    tasks.request_schedule_pass_on_commit()


# --- placing ------------------------------------------------------------------------------

def run_schedule_pass() -> dict[str, int]:
    """Place what can be placed now; record why the rest waits. Single-flight."""
    with transaction.atomic():
        single_flight()
        now = clock.now()
        queue = list(Lease.objects.select_for_update(**LOCK_SKIP)
                     .filter(state=S.QUEUED).select_related("tenant")
                     .order_by("-queue_boost", "created")[:PASS_LIMIT])
        if not queue:
            return {"queued": 0, "placed": 0}
        transaction.on_commit(lambda: crashpoint("schedule.after_commit"))
        result = allocation.schedule(queue, now)
        leases = {str(lease.id): lease for lease in queue}
        placed = 0
        for decision in result.decisions:
            lease = leases[decision.request_id]
            if isinstance(decision, allocation.Placement):
                placed += _try_place(lease, decision, now)
            else:
                _note_wait(lease, decision.reason.value, decision.earliest_start)
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
            noticed = _running(placement.victims) if preempt_grace() else ()
            if noticed:  # running spot leases get their notice; this lease starts after it
                placement = _delayed(placement, preempt_grace())
            if not _quota_allows(lease, placement):
                _note_wait(lease, "quota", None)
                return 0
            start = _at(allocation.from_epoch(placement.start))
            if noticed:
                _give_notice(placement.victims, by=lease, until=start)
            else:
                _preempt(placement.victims, by=lease, at=start)  # first: ends their slots
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


class SlotConflict(Exception):
    pass


def _write_allocations(lease: Lease, placement: allocation.Placement,
                       ignoring: tuple[str, ...] = ()) -> None:
    start = allocation.from_epoch(placement.start)
    end = allocation.from_epoch(placement.end)
    assert start is not None and end is not None
    rows = []
    for part in placement.parts:
        gpus = {g.index: g for g in Gpu.objects.filter(node__hostname=part.node)}
        for index, milli in part.gpus:
            gpu = gpus[index]
            rows += [Allocation(lease=lease, gpu=gpu, node_id=gpu.node_id, slot=slot,
                                start_at=start, end_at=end)
                     for slot in _free_slots(gpu, start, end, -(-milli // MILLI_PER_SLOT),
                                             ignoring)]
    Allocation.objects.bulk_create(rows)
    lease.start_at, lease.end_at = start, end


def _free_slots(gpu: Gpu, start: datetime, end: datetime, wanted: int,
                ignoring: tuple[str, ...] = ()) -> list[int]:
    # A lease past its end but still on the hardware keeps its slots now (as in the
    # snapshot: allocation._leases); a later window may follow it, fenced (``handover``).
    # The victims (``ignoring``) end exactly when this one starts.
    held = Q(end_at__gt=start)
    if start < clock.now() + timedelta(seconds=1):
        held |= Q(lease__state__in=allocation.LINGERING)
    used = set(Allocation.objects.filter(gpu=gpu, live=True, start_at__lt=end).filter(held)
               .exclude(lease_id__in=list(ignoring)).values_list("slot", flat=True))
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
        _start_provisioning(lease, now, fields=fields, data=data)
    notify.lease_changed(lease)


def preempt_grace() -> timedelta:
    """How long a running spot lease is warned before it is preempted (0: at once)."""
    return timedelta(seconds=_setting("GPUPOOL_PREEMPT_GRACE_S", 120))


def _running(victims: tuple[str, ...]) -> tuple[str, ...]:
    """The victims that are running: those get a notice; the others go at once."""
    if not victims:
        return ()
    return tuple(str(pk) for pk in Lease.objects.filter(
        pk__in=list(victims), state=S.ACTIVE).values_list("pk", flat=True))


def _at(value: datetime | None) -> datetime:
    assert value is not None
    return value


def _delayed(placement: allocation.Placement, by: timedelta) -> allocation.Placement:
    """The same placement, starting (and ending) ``by`` later: after the victims' notice."""
    shift = int(by.total_seconds())
    return replace(placement, start=placement.start + shift,
                   end=None if placement.end is None else placement.end + shift)


def _give_notice(victims: tuple[str, ...], *, by: Lease, until: datetime) -> None:
    """Running victims end at ``until`` (their allocations too, so the preemptor's can
    start there) and are told so; expiry then ends them as preempted. A victim already
    under an earlier notice keeps it; one not running yet is preempted at once."""
    for victim in Lease.objects.select_for_update(**LOCK).filter(pk__in=list(victims)):
        if victim.state != S.ACTIVE:
            _preempt((str(victim.pk),), by=by, at=until)
            continue
        if victim.release_kind == S.PREEMPTED and victim.end_at <= until:
            continue
        victim.end_at = min(victim.end_at, until)
        victim.release_kind = S.PREEMPTED
        victim.save(update_fields=["end_at", "release_kind", "updated"])
        Allocation.objects.filter(lease=victim, live=True, end_at__gt=victim.end_at).update(
            end_at=victim.end_at)
        states.record(victim, "preemption_notice", reason=f"preempted by {by.short_id}",
                      data={"by": str(by.pk), "at": victim.end_at.isoformat()})
        notify.preempting(victim, victim.end_at)
        _expire_on_time(victim)


def _preempt(victims: tuple[str, ...], *, by: Lease, at: datetime) -> None:
    for victim in Lease.objects.select_for_update(**LOCK).filter(pk__in=list(victims)):
        if victim.state == S.SCHEDULED:
            Allocation.objects.filter(lease=victim, live=True).update(live=False)
            states.transition(victim, S.PREEMPTED, reason=f"preempted by {by.short_id}")
            notify.lease_changed(victim)
        elif victim.state in (S.ACTIVE, S.PROVISIONING):
            _end_slots_at(victim, at)
            begin_release(victim, kind=S.PREEMPTED, reason=f"preempted by {by.short_id}")
        # A victim already releasing frees its slots when its teardown finishes.


def _end_slots_at(victim: Lease, at: datetime) -> None:
    """The victim's slots end where the preemptor's begin but stay live: the preemptor is
    fenced (``handover``) until the victim's teardown is observed. A slot that began at
    ``at`` or later cannot end there, so it is freed — but a victim placed in the same
    second as the preemptor's start is already granted on its node: its freed slots stay
    fenced like a withdrawn lease's (``released_generation``) until the node has applied a
    push without them."""
    rows = Allocation.objects.filter(lease=victim, live=True)
    freed = list(rows.filter(start_at__gte=at).values_list("pk", flat=True))
    rows.filter(end_at__gt=at, start_at__lt=at).update(end_at=at)
    if not freed:
        return
    Allocation.objects.filter(pk__in=freed).update(live=False)
    for node_id, generation in _push_nodes_of(victim).items():
        Allocation.objects.filter(pk__in=freed, node_id=node_id).update(
            released_generation=generation)


# --- provisioning -------------------------------------------------------------------------

def _start_provisioning(lease: Lease, now: datetime, *, fields: tuple[str, ...] = (),
                        data: dict[str, object] | None = None) -> None:
    lease.provision_deadline = now + provision_timeout()
    lease.provision_targets, lease.handover_pending = {}, False
    states.transition(lease, S.PROVISIONING, reason="placed", data=data,
                      fields=(*fields, "provision_deadline", "provision_targets",
                              "handover_pending"))
    lease_id = lease.pk
    transaction.on_commit(lambda: _enqueue("provision", lease_id))


def _enqueue(step: str, lease_id: object) -> None:
    from portal.leasing import tasks

    tasks.enqueue_step(step, str(lease_id))


def _push(lease: Lease) -> dict[str, int]:
    targets = {str(node.pk): desired.push_node(node) for node in desired.lease_nodes(lease)}
    targets["fabric"] = desired.push_fabric()
    if settings.GPUPOOL_SIMULATED_AGENTS:
        from portal.leasing import tasks

        node_ids = [k for k in targets if k != "fabric"]
        transaction.on_commit(lambda: tasks.simulate_agents_on_commit(node_ids))
    return targets


def _converged(targets: dict[str, int]) -> bool:
    from portal.inventory.models import Node

    nodes = {str(n.pk): n for n in Node.objects.filter(
        pk__in=[k for k in targets if k != "fabric"])}
    return all(fleet_selectors.node_converged(node=nodes[k], generation=g)
               for k, g in targets.items() if k != "fabric" and k in nodes)


def _lock(lease_id: object) -> Lease | None:
    return (Lease.objects.select_for_update(**LOCK).select_related("tenant")
            .filter(pk=lease_id).first())


def provision(lease_id: object) -> None:
    """Write the desired state for the lease's nodes and the fabric (idempotent)."""
    with transaction.atomic():
        lease = _lock(lease_id)
        if lease is None or lease.state != S.PROVISIONING or lease.provision_targets:
            return
        _push_provisioning(lease)
        crashpoint("provision.after_push")


def _push_provisioning(lease: Lease, *, fields: tuple[str, ...] = ()) -> None:
    """Push the lease's nodes. The fence is read BEFORE the push: slots only ever become
    free, so if it reads clear, the push granted every slot (see ``handover``)."""
    lease.handover_pending = handover.is_fenced(lease)
    lease.provision_targets = _push(lease)
    lease.save(update_fields=["provision_targets", "handover_pending", "updated", *fields])


def check_provisioned(lease_id: object) -> None:
    with transaction.atomic():
        lease = _lock(lease_id)
        if lease is None or lease.state != S.PROVISIONING or not lease.provision_targets:
            return
        now = clock.now()
        if lease.handover_pending:
            _handover(lease, now)  # pushed again once free (maybe already applied), or not
            if lease.handover_pending or lease.state != S.PROVISIONING:
                return
        if _converged(lease.provision_targets):
            crashpoint("provision.before_active")
            lease.active_at = now
            states.transition(lease, S.ACTIVE, reason="all nodes converged",
                              fields=("active_at",))
            notify.lease_changed(lease)
            _expire_on_time(lease)
        elif lease.provision_deadline and now > lease.provision_deadline:
            _provision_timed_out(lease)


def _handover(lease: Lease, now: datetime) -> None:
    """A lease pushed without some slots: once their previous holders are gone, push
    again (with a fresh deadline) and wait for that; until then it is never ACTIVE."""
    if not handover.is_fenced(lease):
        lease.provision_deadline = now + provision_timeout()
        _push_provisioning(lease, fields=("provision_deadline",))
        states.record(lease, "handover", reason="previous holders' teardown observed")
    elif lease.provision_deadline and now > lease.provision_deadline:
        _provision_timed_out(lease)


def _provision_timed_out(lease: Lease) -> None:
    lease.provision_attempts += 1
    if lease.provision_attempts < MAX_PROVISION_ATTEMPTS:
        lease.provision_targets = {}
        states.transition(lease, S.QUEUED, reason="nodes did not converge; retrying elsewhere",
                          fields=("provision_attempts", "provision_targets"))
        _withdraw(lease)
        after_commit_schedule()
    else:
        lease.release_kind = S.FAILED
        lease.ended_at = clock.now()
        lease.teardown_deadline = lease.ended_at + release_timeout()
        states.transition(lease, S.RELEASING, reason="provisioning failed",
                          fields=("provision_attempts", "release_kind", "ended_at",
                                  "teardown_deadline"))
        lease.provision_targets = {}
        lease.save(update_fields=["provision_targets"])
        _withdraw(lease)
        transaction.on_commit(lambda: _enqueue("teardown", lease.pk))
    notify.lease_changed(lease)


def _withdraw(lease: Lease) -> None:
    """Free the slots of a lease that no longer grants (it is not waiting for its own
    teardown) and push its nodes without it. A node may have applied its grant already, so
    each freed slot stays fenced (``Allocation.released_generation``, see ``handover``)
    until its node has applied this push."""
    freed = list(Allocation.objects.filter(lease=lease, live=True).values_list("pk", flat=True))
    Allocation.objects.filter(pk__in=freed).update(live=False)
    for node_id, generation in _push_nodes_of(lease).items():
        Allocation.objects.filter(pk__in=freed, node_id=node_id).update(
            released_generation=generation)


def _push_nodes_of(lease: Lease) -> dict[int, int]:
    pushed = {node.pk: desired.push_node(node) for node in desired.lease_nodes(lease)}
    desired.push_fabric()
    return pushed


# --- releasing ----------------------------------------------------------------------------

def begin_release(lease: Lease, *, kind: str, actor: str = "system", reason: str = "") -> None:
    """ACTIVE/PROVISIONING → RELEASING; billing stops now; teardown follows on commit."""
    lease.release_kind = kind
    if lease.active_at is not None and lease.ended_at is None:
        lease.ended_at = clock.now()
    lease.provision_targets = {}
    lease.teardown_deadline = clock.now() + release_timeout()
    states.transition(lease, S.RELEASING, actor=actor, reason=reason,
                      fields=("release_kind", "ended_at", "provision_targets",
                              "teardown_deadline"))
    notify.lease_changed(lease)
    lease_id = lease.pk
    transaction.on_commit(lambda: _enqueue("teardown", lease_id))


def teardown(lease_id: object) -> None:
    with transaction.atomic():
        lease = _lock(lease_id)
        if lease is None or lease.state != S.RELEASING or lease.provision_targets:
            return
        lease.provision_targets = _push(lease)
        lease.save(update_fields=["provision_targets", "updated"])
        crashpoint("release.after_teardown_push")


def check_released(lease_id: object) -> None:
    with transaction.atomic():
        lease = _lock(lease_id)
        if lease is None or lease.state != S.RELEASING or not lease.provision_targets:
            return
        if _converged(lease.provision_targets):
            finish_release(lease)
        elif clock.now() > (lease.teardown_deadline or lease.updated + release_timeout()):
            _teardown_timed_out(lease)


def _teardown_timed_out(lease: Lease) -> None:
    """The node never confirmed the teardown: the previous tenant may still be on those
    GPUs. Quarantine them (no one is placed there until staff release them), move the
    leases that waited for them, then end this one."""
    reason = f"teardown of lease {lease.short_id} not observed in time"
    rows = Allocation.objects.filter(lease=lease, live=True).select_related("gpu", "node")
    for row in {(r.node, r.gpu.index, r.gpu.uuid) for r in rows}:
        gpu_quarantine(node=row[0], index=row[1], uuid=row[2], health=Gpu.Health.QUARANTINED,
                       reason=reason)
    waiting = handover.waiting_on(lease, states=(S.PROVISIONING, S.SCHEDULED))
    for other in Lease.objects.select_for_update(**LOCK).filter(pk__in=waiting):
        _displace(other, reason=f"its GPUs were quarantined: {reason}")
    finish_release(lease, note="teardown not observed in time; GPUs quarantined")


def _displace(lease: Lease, *, reason: str) -> None:
    """Back to the queue, off the quarantined GPUs, to be placed elsewhere."""
    lease.provision_targets, lease.handover_pending = {}, False
    states.transition(lease, S.QUEUED, reason=reason,
                      fields=("provision_targets", "handover_pending"))
    _withdraw(lease)
    notify.lease_changed(lease)


def finish_release(lease: Lease, *, note: str = "") -> None:
    now = clock.now()
    _wake_on_commit(handover.waiting_on(lease))
    for row in Allocation.objects.filter(lease=lease, live=True):
        row.live = False
        row.end_at = max(min(row.end_at, now), row.start_at + timedelta(seconds=1))
        row.save(update_fields=["live", "end_at"])
    states.transition(lease, lease.release_kind or S.ENDED, reason=note or "released")
    notify.lease_changed(lease)
    after_commit_schedule()


def _wake_on_commit(lease_ids: list[object]) -> None:
    """The leases that waited for these slots push again (the reconciler backstops)."""
    def wake() -> None:
        for lease_id in lease_ids:
            _enqueue("check_provisioned", lease_id)
    if lease_ids:
        transaction.on_commit(wake)


def node_converged(node_id: int) -> None:
    """A node's observed state changed (``fleet.hooks``): move what waits for it, in the
    report's transaction. Teardowns first, so a GPU handed over is pushed at once."""
    on_node = Allocation.objects.filter(node_id=node_id).values("lease_id")
    for step, state in ((check_released, S.RELEASING), (check_provisioned, S.PROVISIONING)):
        for lease_id in Lease.objects.filter(pk__in=on_node, state=state).order_by(
                "created").values_list("pk", flat=True):
            step(lease_id)


def cancel(lease: Lease, *, actor: str, reason: str) -> None:
    if lease.state in states.WAITING | {S.SCHEDULED}:
        Allocation.objects.filter(lease=lease, live=True).update(live=False)
        states.transition(lease, S.CANCELLED, actor=actor, reason=reason)
        notify.lease_changed(lease)
        after_commit_schedule()
    else:
        begin_release(lease, kind=S.CANCELLED, actor=actor, reason=reason)


def extend(lease: Lease, end_at: datetime) -> None:
    try:
        with transaction.atomic():
            Allocation.objects.filter(lease=lease, live=True).update(end_at=end_at)
    except IntegrityError:
        from portal.leasing.services import ExtensionRefused

        raise ExtensionRefused(_("The GPUs are booked by another lease."), None) from None
    lease.end_at, lease.warned_at = end_at, None
    lease.save(update_fields=["end_at", "warned_at", "updated"])
    notify.lease_changed(lease)
    _expire_on_time(lease)


def _expire_on_time(lease: Lease) -> None:
    """An ETA task ends the lease at ``end_at`` (the beat's ``expire_due`` backstops)."""
    from portal.leasing import tasks

    tasks.schedule_expiry_on_commit(lease.pk, lease.end_at)


# --- time-driven --------------------------------------------------------------------------

def start_due_reservations() -> int:
    started = 0
    now = clock.now()
    with transaction.atomic():
        for lease in Lease.objects.select_for_update(**LOCK_SKIP).filter(
                state=S.SCHEDULED, start_at__lte=now):
            _start_provisioning(lease, now)
            notify.lease_changed(lease)
            started += 1
    return started


def expire_due() -> int:
    now = clock.now()
    with transaction.atomic():
        due = list(Lease.objects.select_for_update(**LOCK_SKIP).select_related("tenant")
                   .filter(state=S.ACTIVE, end_at__lte=now))
        for lease in due:
            _expire(lease)
        if due:
            crashpoint("expire.before_commit")
    return len(due)


def _expire(lease: Lease) -> None:
    if lease.release_kind == S.PREEMPTED:  # its notice ran out (``_give_notice``)
        begin_release(lease, kind=S.PREEMPTED, reason="preemption notice ended")
    else:
        begin_release(lease, kind=S.EXPIRED, reason="reached its end time")


def expire_lease(lease_id: object) -> datetime | None:
    """End one lease if it is due (its ETA task); the end still ahead, if it is not."""
    with transaction.atomic():
        lease = _lock(lease_id)
        if lease is None or lease.state != S.ACTIVE:
            return None
        if lease.end_at > clock.now():
            return lease.end_at
        _expire(lease)
        crashpoint("expire.before_commit")
    return None


def warn_expiring(minutes: int = 60) -> int:
    now = clock.now()
    with transaction.atomic():
        due = list(Lease.objects.select_for_update(**LOCK_SKIP).select_related("tenant")
                   .filter(state=S.ACTIVE, warned_at__isnull=True,
                           end_at__lte=now + timedelta(minutes=minutes), end_at__gt=now)
                   .exclude(release_kind=S.PREEMPTED))  # told already (``_give_notice``)
        for lease in due:
            lease.warned_at = now
            lease.save(update_fields=["warned_at", "updated"])
            states.record(lease, "expiry_warning", reason=f"ends within {minutes} minutes")
            notify.expiring(lease, minutes)
    return len(due)


def gpus_quarantined(node_id: int, indexes: list[int]) -> None:
    """GPUs of a node were found unclean (``fleet.hooks``): a lease waiting to run on them
    goes back to the queue, never activated there (issue 10.1)."""
    on_them = Allocation.objects.filter(node_id=node_id, gpu__index__in=indexes, live=True,
                                        lease__state__in=(S.PROVISIONING, S.SCHEDULED))
    for lease in Lease.objects.select_for_update(**LOCK).filter(
            pk__in=on_them.values("lease_id")).order_by("created"):
        _displace(lease, reason=f"its GPUs {indexes} on node {node_id} were found unclean "
                                "after the previous lease and quarantined")
