"""Writes of the operators' console. Each is staff-only, atomic and audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from portal.core.errors import ApplicationError, PermissionDenied
from portal.core.services import audit_record
from portal.inventory.models import Gpu
from portal.leasing.models import Lease
from portal.tenants.access import is_staff

BOOST_RANGE = range(-1000, 1001)


def _staff(actor: Any) -> None:
    if not is_staff(actor):
        raise PermissionDenied("Only platform staff can do this.")


@transaction.atomic
def lease_set_queue_boost(*, actor: Any, lease: Lease, boost: int, reason: str = "") -> Lease:
    """Manual prioritisation of a waiting order (higher boost = considered earlier)."""
    _staff(actor)
    if boost not in BOOST_RANGE:
        raise ApplicationError("Boost must be between -1000 and 1000.",
                               fields={"boost": ["out of range"]})
    lease = Lease.objects.select_for_update().get(pk=lease.pk)
    old = lease.queue_boost
    if old != boost:
        Lease.objects.filter(pk=lease.pk).update(queue_boost=boost)
        lease.queue_boost = boost
        audit_record(actor=actor, action="lease.queue_boost", obj=lease,
                     changes={"queue_boost": [old, boost], "reason": reason})
    return lease


@transaction.atomic
def gpu_set_health(*, actor: Any, gpu: Gpu, health: str, reason: str = "") -> Gpu:
    """Quarantine a GPU (no new placements) or release it back to healthy."""
    _staff(actor)
    if health not in (Gpu.Health.QUARANTINED, Gpu.Health.HEALTHY):
        raise ApplicationError("Quarantine or release only.", fields={"health": ["invalid"]})
    gpu = Gpu.objects.select_for_update().get(pk=gpu.pk)
    old = gpu.health
    if old != health:
        gpu.health = health
        gpu.save(update_fields=["health"])
        audit_record(actor=actor, action="gpu.quarantine" if health == "quarantined"
                     else "gpu.release", obj=gpu, changes={"health": [old, health],
                                                           "reason": reason})
    return gpu
