"""Preemption: spot (and borrowed) leases make way for on-demand and reserved orders.

A running victim is warned first (ACTIVE → NOTICE, ``GPUPOOL_PREEMPT_GRACE_S``): it keeps
its GPUs, its access and its billing until the notice ends, then is released as
preempted (``expiry``). A victim not running yet is preempted at once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from portal.leasing import allocation, notify, states
from portal.leasing.lifecycle import dispatch, pushing
from portal.leasing.lifecycle.releasing import begin_release
from portal.leasing.models import LOCK, Allocation, Lease
from portal.leasing.models import LeaseState as S


def running(victims: tuple[str, ...]) -> tuple[str, ...]:
    """The victims that are running: those get a notice; the others go at once."""
    if not victims:
        return ()
    return tuple(str(pk) for pk in Lease.objects.filter(
        pk__in=list(victims), state__in=sorted(states.RUNNING)).values_list("pk", flat=True))


def delayed(placement: allocation.Placement, by: timedelta) -> allocation.Placement:
    """The same placement, starting (and ending) ``by`` later: after the victims' notice."""
    shift = int(by.total_seconds())
    return replace(placement, start=placement.start + shift,
                   end=None if placement.end is None else placement.end + shift)


def give_notice(victims: tuple[str, ...], *, by: Lease, until: datetime) -> None:
    """Running victims end at ``until`` (their allocations too, so the preemptor's can
    start there) and are told so (ACTIVE → NOTICE); expiry then ends them as preempted. A
    victim already under an earlier notice keeps it; one not running yet is preempted at
    once."""
    for victim in Lease.objects.select_for_update(**LOCK).filter(pk__in=list(victims)):
        if victim.state not in states.RUNNING:
            preempt((str(victim.pk),), by=by, at=until)
            continue
        if victim.state == S.NOTICE and victim.end_at <= until:
            continue
        _notice(victim, by=by, until=until)


def _notice(victim: Lease, *, by: Lease, until: datetime) -> None:
    victim.end_at = min(victim.end_at, until)
    victim.release_kind = S.PREEMPTED  # the state it will end in
    Allocation.objects.filter(lease=victim, live=True, end_at__gt=victim.end_at).update(
        end_at=victim.end_at)
    reason = f"preempted by {by.short_id}"
    data = {"by": str(by.pk), "at": victim.end_at.isoformat()}
    if victim.state == S.ACTIVE:
        states.transition(victim, S.NOTICE, reason=reason, data=data,
                          fields=("end_at", "release_kind"))
    else:  # a shorter notice for a lease under one already
        victim.save(update_fields=["end_at", "release_kind", "updated"])
        states.record(victim, "preemption_notice", reason=reason, data=data)
    notify.preempting(victim, victim.end_at)
    dispatch.expiry_on_commit(victim.pk, victim.end_at)


def preempt(victims: tuple[str, ...], *, by: Lease, at: datetime) -> None:
    """Victims go at once: a reserved one ends; a granting one is released as preempted."""
    for victim in Lease.objects.select_for_update(**LOCK).filter(pk__in=list(victims)):
        if victim.state == S.SCHEDULED:
            Allocation.objects.filter(lease=victim, live=True).update(live=False)
            states.transition(victim, S.PREEMPTED, reason=f"preempted by {by.short_id}")
            notify.lease_changed(victim)
        elif victim.state in states.GRANTING:
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
    pushing.fence_freed(victim, freed)
