"""Quota and budget arithmetic (reads; the allocating transaction re-checks)."""

from __future__ import annotations

from calendar import monthrange
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import F, Q, Sum

from portal.leasing.models import Allocation, Lease, LeaseState, Quota
from portal.tenants.models import Tenant

COMMITTED = (LeaseState.QUEUED, LeaseState.SCHEDULED, LeaseState.PROVISIONING,
             LeaseState.ACTIVE, LeaseState.RELEASING)
PENDING = (LeaseState.REQUESTED, LeaseState.QUEUED, LeaseState.SCHEDULED)
# What counts against a member's personal limit: every lease not yet in a terminal state.
MEMBER_COUNTED = (LeaseState.REQUESTED, *COMMITTED)


def quota_for(tenant: Tenant, model: str) -> Quota | None:
    """The model's own row, else the tenant-wide row ('' model), else None (no limit)."""
    rows = {q.gpu_model: q for q in Quota.objects.filter(tenant=tenant,
                                                          gpu_model__in=[model, ""])}
    return rows.get(model) or rows.get("")


def month_bounds(at: datetime) -> tuple[datetime, datetime]:
    start = at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    days = monthrange(start.year, start.month)[1]
    return start, start + timedelta(days=days)


def gpus_held(tenant: Tenant, model: str, start: datetime, end: datetime,
              exclude_lease: object = None) -> Decimal:
    """Whole-GPU equivalents the tenant holds of ``model`` at some point in [start, end).

    Conservative: the sum over every allocation overlapping the window.
    """
    slots = Allocation.objects.filter(
        live=True, lease__tenant=tenant, gpu__model=model, start_at__lt=end, end_at__gt=start)
    if exclude_lease is not None:
        slots = slots.exclude(lease_id=exclude_lease)
    return Decimal(slots.count()) / 8


def gpu_hours_committed(tenant: Tenant, month_start: datetime, month_end: datetime,
                        exclude_lease: object = None) -> Decimal:
    """GPU-hours of the tenant's leases inside the month: used so far plus planned."""
    total = Decimal(0)
    qs = Lease.objects.filter(tenant=tenant).filter(
        Q(state__in=COMMITTED) | Q(active_at__isnull=False)).filter(
        start_at__lt=month_end, end_at__gt=month_start)
    if exclude_lease is not None:
        qs = qs.exclude(pk=exclude_lease)
    for lease in qs.only("start_at", "end_at", "active_at", "ended_at", "gpu_count", "nodes",
                         "gpu_milli", "state"):
        begin = max(lease.active_at or lease.start_at, month_start)
        finish = min(lease.ended_at or lease.end_at, month_end)
        if finish > begin:
            hours = Decimal((finish - begin).total_seconds()) / 3600
            total += hours * Decimal(str(lease.total_gpus))
    return total


def pending_orders(tenant: Tenant) -> int:
    return Lease.objects.filter(tenant=tenant, state__in=PENDING).count()


def member_gpus(tenant: Tenant, user_ids: list[object] | None = None) -> dict[object, Decimal]:
    """GPUs (fractions counted as such) of each member's own non-terminal leases in ``tenant``.

    Keyed by user id (``Lease.created_by``); members without such leases are absent.
    """
    qs = Lease.objects.filter(tenant=tenant, state__in=MEMBER_COUNTED,
                              created_by__isnull=False)
    if user_ids is not None:
        qs = qs.filter(created_by_id__in=user_ids)
    rows = (qs.values("created_by_id")
            .annotate(milli=Sum(F("gpu_count") * F("nodes") * F("gpu_milli")))
            .order_by())
    return {r["created_by_id"]: Decimal(r["milli"] or 0) / 1000 for r in rows}
