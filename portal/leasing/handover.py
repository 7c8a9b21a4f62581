"""The fenced GPU handover (ADR 0104): a GPU slot goes to the next lease only once the
previous holder is off the hardware.

A lease keeps its allocation rows ``live`` until its teardown is *observed* converged on
the node (``orchestration.finish_release``) or its GPUs are quarantined. So "someone else
is still on this slot" is a plain database fact: another lease in a state that may be on
the hardware holds a live allocation of the same GPU slot that started earlier. Such an
allocation is *fenced*: the node's desired state does not grant it (``desired._grants``),
and its lease does not become ACTIVE. Live allocations only ever turn non-live, so a fence
read before a push can only be stricter than the one the push sees: no interleaving of
workers grants a fenced slot.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from portal.leasing.models import Allocation, Lease
from portal.leasing.models import LeaseState as S
from portal.leasing.states import ON_HARDWARE


def earlier_holder() -> Exists:
    """For an allocation row (the outer query): another lease still on its slot."""
    return Exists(Allocation.objects.filter(
        gpu_id=OuterRef("gpu_id"), slot=OuterRef("slot"), live=True,
        start_at__lt=OuterRef("start_at"), lease__state__in=sorted(ON_HARDWARE),
    ).exclude(lease_id=OuterRef("lease_id")))


def unfenced(rows: QuerySet[Allocation]) -> QuerySet[Allocation]:
    """The rows whose slot is free of earlier holders (those may be granted)."""
    return rows.filter(~earlier_holder())


def is_fenced(lease: Lease) -> bool:
    """Does any of the lease's live slots still wait for a previous holder?"""
    return Allocation.objects.filter(lease=lease, live=True).filter(earlier_holder()).exists()


def waiting_on(lease: Lease, states: tuple[str, ...] = (S.PROVISIONING,)) -> list[Any]:
    """Ids of the leases (in ``states``) whose live slots follow this lease's live slots."""
    mine = Allocation.objects.filter(lease=lease, live=True)
    later = Allocation.objects.filter(live=True, lease__state__in=states).exclude(
        lease=lease).filter(Exists(mine.filter(gpu_id=OuterRef("gpu_id"),
                                               slot=OuterRef("slot"),
                                               start_at__lt=OuterRef("start_at"))))
    return list(later.values_list("lease_id", flat=True).distinct())
