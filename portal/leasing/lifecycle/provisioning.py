"""Provisioning: a placed lease's desired state is written, then it waits for its nodes
(and for the previous holders of its GPU slots: the fenced handover, ADR 0104)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from portal.core import clock, histograms
from portal.core.crash import crashpoint
from portal.leasing import desired, handover, migdevices, notify, states
from portal.leasing.lifecycle import dispatch, pushing, timing
from portal.leasing.models import LOCK_SKIP, Lease
from portal.leasing.models import LeaseState as S

ACTIVATION_HISTOGRAM = "gpupool_order_to_active_seconds"


def start(lease: Lease, now: datetime, *, fields: tuple[str, ...] = (),
          data: dict[str, object] | None = None) -> None:
    """→ PROVISIONING (from a placement or a due reservation); the push follows on commit."""
    lease.provision_deadline = now + timing.provision_timeout()
    lease.provision_targets, lease.handover_pending = {}, False
    states.transition(lease, S.PROVISIONING, reason="placed", data=data,
                      fields=(*fields, "provision_deadline", "provision_targets",
                              "handover_pending"))
    dispatch.step_on_commit("provision", lease.pk)


def provision(lease_id: object, *, fabric: int | None = None) -> bool:
    """Write the desired state for the lease's nodes and the fabric (idempotent); True if
    this call pushed. ``fabric``: see ``pushing.push``."""
    with transaction.atomic():
        lease = pushing.lock(lease_id)
        if lease is None or lease.state != S.PROVISIONING or lease.provision_targets:
            return False
        _push(lease, fabric=fabric)
        crashpoint("provision.after_push")
        return True


def unpushed(limit: int) -> list[object]:
    """Placed leases whose desired state is not written yet, oldest first."""
    return list(Lease.objects.filter(state=S.PROVISIONING, provision_targets={})
                .order_by("updated", "id").values_list("pk", flat=True)[:limit])


def provision_batch(lease_id: object) -> None:
    """The ``provision`` step: this lease and up to ``PROVISION_BATCH`` other placed ones
    still waiting for their push, under ONE partition map. Deriving the map reads every
    granting slot of the fleet, so a pass that placed 300 leases made 300 provisioning
    steps derive it one after the other behind its row lock (the 1,000-node fill of
    issue 27's healing benchmark stalled on it). The map is derived first, in its own
    transaction: it is made of the slots the pass committed (placed leases' allocations,
    not their pushes), so it covers every lease of the batch; each lease's nodes are then
    pushed in a transaction of its own. A worker killed in between leaves the rest
    unpushed, which the reconciler re-drives (and which derive the map again)."""
    waiting = unpushed(PROVISION_BATCH)
    mine = Lease.objects.filter(pk=lease_id, state=S.PROVISIONING, provision_targets={})
    if not mine.exists():  # pushed already (by another lease's batch): nothing to derive
        if not waiting:
            return
        lease_id = waiting[0]
    peers = [pk for pk in waiting if str(pk) != str(lease_id)]
    with transaction.atomic():
        generation = desired.push_fabric()
    for pk in [lease_id, *peers]:
        provision(pk, fabric=generation)


PROVISION_BATCH = 64


def _push(lease: Lease, *, fields: tuple[str, ...] = (), fabric: int | None = None) -> None:
    """Push the lease's nodes. The fence is read BEFORE the push: slots only ever become
    free, so if it reads clear, the push granted every slot (see ``handover``)."""
    lease.handover_pending = handover.is_fenced(lease)
    lease.provision_targets = pushing.push(lease, fabric=fabric)
    lease.save(update_fields=["provision_targets", "handover_pending", "updated", *fields])


def check_provisioned(lease_id: object) -> None:
    """PROVISIONING → ACTIVE once every node has applied the push (and no slot is fenced);
    past the deadline: retried elsewhere once, then failed."""
    with transaction.atomic():
        lease = pushing.lock(lease_id)
        if lease is None or lease.state != S.PROVISIONING or not lease.provision_targets:
            return
        now = clock.now()
        if lease.handover_pending:
            _handover(lease, now)  # pushed again once free (maybe already applied), or not
            if lease.handover_pending or lease.state != S.PROVISIONING:
                return
        if pushing.converged(lease.provision_targets) and migdevices.ready(lease):
            crashpoint("provision.before_active")
            lease.active_at = now
            states.transition(lease, S.ACTIVE, reason="all nodes converged",
                              fields=("active_at",))
            _observe_activation(lease, now)
            notify.lease_changed(lease)
            dispatch.expiry_on_commit(lease.pk, lease.end_at)
        elif lease.provision_deadline and now > lease.provision_deadline:
            _timed_out(lease)


def _observe_activation(lease: Lease, now: datetime) -> None:
    """Order → active into ``/metrics``: from when the lease could start (ordered, or its
    requested start if later). After commit, in a statement of its own, so that the
    histogram's row is never locked by a lease's transaction (ADR 0230)."""
    waited = max((now - max(lease.created, lease.start_at)).total_seconds(), 0.0)
    transaction.on_commit(lambda: histograms.observe(ACTIVATION_HISTOGRAM, waited))


def _handover(lease: Lease, now: datetime) -> None:
    """A lease pushed without some slots: once their previous holders are gone, push
    again (with a fresh deadline) and wait for that; until then it is never ACTIVE."""
    if not handover.is_fenced(lease):
        lease.provision_deadline = now + timing.provision_timeout()
        _push(lease, fields=("provision_deadline",))
        states.record(lease, "handover", reason="previous holders' teardown observed")
    elif lease.provision_deadline and now > lease.provision_deadline:
        _timed_out(lease)


def _timed_out(lease: Lease) -> None:
    lease.provision_attempts += 1
    if lease.provision_attempts < timing.MAX_PROVISION_ATTEMPTS:
        lease.provision_targets = {}
        states.transition(lease, S.QUEUED, reason="nodes did not converge; retrying elsewhere",
                          fields=("provision_attempts", "provision_targets"))
        pushing.withdraw(lease)
        dispatch.schedule_pass_on_commit()
    else:
        lease.release_kind = S.FAILED
        lease.ended_at = clock.now()
        lease.teardown_deadline = lease.ended_at + timing.release_timeout()
        states.transition(lease, S.RELEASING, reason="provisioning failed",
                          fields=("provision_attempts", "release_kind", "ended_at",
                                  "teardown_deadline"))
        lease.provision_targets = {}
        lease.save(update_fields=["provision_targets"])
        pushing.withdraw(lease)
        dispatch.step_on_commit("teardown", lease.pk)
    notify.lease_changed(lease)


def start_due_reservations() -> int:
    """SCHEDULED leases whose start has come begin provisioning (reconciler)."""
    started = 0
    now = clock.now()
    with transaction.atomic():
        for lease in Lease.objects.select_for_update(**LOCK_SKIP).filter(
                state=S.SCHEDULED, start_at__lte=now):
            start(lease, now)
            notify.lease_changed(lease)
            started += 1
    return started
