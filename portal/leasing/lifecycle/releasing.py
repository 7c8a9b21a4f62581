"""Releasing: access and partitions are removed, the teardown is observed, the GPU slots
are handed on (or quarantined when the teardown is never observed)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction

from portal.core import clock
from portal.core.crash import crashpoint
from portal.fleet.services.health import gpu_quarantine
from portal.inventory.models import Gpu
from portal.leasing import handover, notify, states
from portal.leasing.lifecycle import dispatch, pushing, timing
from portal.leasing.models import LOCK, Allocation, Lease, LeaseFault
from portal.leasing.models import LeaseState as S


def begin_release(lease: Lease, *, kind: str, actor: str = "system", reason: str = "") -> None:
    """PROVISIONING/ACTIVE/NOTICE → RELEASING; billing stops now; teardown follows on
    commit; ``kind`` is the final state once the teardown is observed."""
    lease.release_kind = kind
    if lease.active_at is not None and lease.ended_at is None:
        lease.ended_at = clock.now()
    lease.provision_targets = {}
    lease.teardown_deadline = clock.now() + timing.release_timeout()
    resolve_faults(lease, LeaseFault.Resolution.RELEASED if kind == S.ENDED
                   else LeaseFault.Resolution.ENDED)
    lease.condition, lease.heal_targets, lease.heal_deadline = "", {}, None
    states.transition(lease, S.RELEASING, actor=actor, reason=reason,
                      fields=("release_kind", "ended_at", "provision_targets",
                              "teardown_deadline", "condition", "heal_targets",
                              "heal_deadline"))
    notify.lease_changed(lease)
    dispatch.step_on_commit("teardown", lease.pk)


def resolve_faults(lease: Lease, resolution: str) -> int:
    """Close the (locked) lease's open faults: continued smaller, released or ended."""
    return LeaseFault.objects.filter(lease=lease, resolution=LeaseFault.Resolution.OPEN
                                     ).update(resolution=resolution, resolved_at=clock.now())


def teardown(lease_id: object) -> None:
    """Write the desired state without the lease (idempotent)."""
    with transaction.atomic():
        lease = pushing.lock(lease_id)
        if lease is None or lease.state != S.RELEASING or lease.provision_targets:
            return
        lease.provision_targets = pushing.push(lease)
        lease.save(update_fields=["provision_targets", "updated"])
        crashpoint("release.after_teardown_push")


def check_released(lease_id: object) -> None:
    """RELEASING → its ``release_kind`` once every node has applied the teardown; past
    ``teardown_deadline``: its GPUs are quarantined."""
    with transaction.atomic():
        lease = pushing.lock(lease_id)
        if lease is None or lease.state != S.RELEASING or not lease.provision_targets:
            return
        if pushing.converged(lease.provision_targets):
            finish_release(lease)
        elif clock.now() > (lease.teardown_deadline or lease.updated + timing.release_timeout()):
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
    waiting = handover.waiting_on(lease, states=tuple(sorted(states.PLACED)))
    for other in Lease.objects.select_for_update(**LOCK).filter(pk__in=waiting):
        displace(other, reason=f"its GPUs were quarantined: {reason}")
    finish_release(lease, note="teardown not observed in time; GPUs quarantined")


def displace(lease: Lease, *, reason: str) -> None:
    """Back to the queue, off the quarantined GPUs, to be placed elsewhere."""
    lease.provision_targets, lease.handover_pending = {}, False
    states.transition(lease, S.QUEUED, reason=reason,
                      fields=("provision_targets", "handover_pending"))
    pushing.withdraw(lease)
    notify.lease_changed(lease)


def finish_release(lease: Lease, *, note: str = "") -> None:
    """The teardown is observed: the slots are free, the leases waiting on them push."""
    now = clock.now()
    dispatch.steps_on_commit("check_provisioned", handover.waiting_on(lease))
    for row in Allocation.objects.filter(lease=lease, live=True):
        row.live = False
        row.end_at = max(min(row.end_at, now), row.start_at + timedelta(seconds=1))
        row.save(update_fields=["live", "end_at"])
    states.transition(lease, lease.release_kind or S.ENDED, reason=note or "released")
    notify.lease_changed(lease)
    dispatch.schedule_pass_on_commit()


def cancel(lease: Lease, *, actor: str, reason: str) -> None:
    """A waiting or reserved lease ends at once; a provisioning one is released."""
    if lease.state in states.WAITING | {S.SCHEDULED}:
        Allocation.objects.filter(lease=lease, live=True).update(live=False)
        states.transition(lease, S.CANCELLED, actor=actor, reason=reason)
        notify.lease_changed(lease)
        dispatch.schedule_pass_on_commit()
    else:
        begin_release(lease, kind=S.CANCELLED, actor=actor, reason=reason)


def gpus_quarantined(node_id: int, indexes: list[int]) -> None:
    """GPUs of a node were found unclean (``fleet.hooks``): a lease waiting to run on them
    goes back to the queue, never activated there (issue 10.1)."""
    on_them = Allocation.objects.filter(node_id=node_id, gpu__index__in=indexes, live=True,
                                        lease__state__in=sorted(states.PLACED))
    for lease in Lease.objects.select_for_update(**LOCK).filter(
            pk__in=on_them.values("lease_id")).order_by("created"):
        displace(lease, reason=f"its GPUs {indexes} on node {node_id} were found unclean "
                               "after the previous lease and quarantined")
