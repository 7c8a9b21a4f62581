"""Quota and budget arithmetic (reads; the allocating transaction re-checks)."""

from __future__ import annotations

from calendar import monthrange
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import Case, F, IntegerField, Q, Sum, Value, When

from portal.leasing import states
from portal.leasing.models import MILLI_PER_SLOT, Allocation, Lease, Quota
from portal.tenants.models import Tenant

COMMITTED = tuple(sorted(states.COMMITTED))
PENDING = tuple(sorted(states.PENDING))
# What counts against a member's personal limit: every lease not yet in a terminal state.
MEMBER_COUNTED = tuple(sorted(states.LIVE))


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
    # A plain slot is an eighth; a MIG lease counts its instances' GPU equivalents, not the
    # memory slices it holds (ADR 0222): gpu_milli per instance, on its start slot's row.
    milli = slots.aggregate(milli=Sum(Case(
        When(lease__mig_profile="", then=Value(MILLI_PER_SLOT)),
        When(mig_instance__isnull=False, then=F("lease__gpu_milli")),
        default=Value(0), output_field=IntegerField())))["milli"] or 0
    return Decimal(milli) / 1000


@dataclass(frozen=True)
class HoursUsed:
    """A model's GPU-hours in one month, the two parts apart.

    ``metered``: run so far (what billing meters: ``active_at`` to the earliest of the end,
    the release and now). ``committed``: still to come, of leases placed or waiting (from
    the later of their start and now to their end). The budget is charged with both.
    """

    metered: Decimal
    committed: Decimal

    @property
    def total(self) -> Decimal:
        return self.metered + self.committed


def _clipped_hours(begin: datetime, finish: datetime, lo: datetime, hi: datetime) -> Decimal:
    seconds = (min(finish, hi) - max(begin, lo)).total_seconds()
    return Decimal(max(seconds, 0)) / 3600


def _counts_for(lease: Lease, model: str) -> bool:
    """A placed lease counts for its model; a waiting one for every model it may land on."""
    return lease.gpu_model == model if lease.gpu_model else model in lease.allowed_models


def gpu_hours_used(tenant: Tenant, model: str, month_start: datetime, month_end: datetime,
                   now: datetime, exclude_lease: object = None) -> HoursUsed:
    """Metered and committed GPU-hours of ``model`` inside [month_start, month_end)."""
    qs = Lease.objects.filter(tenant=tenant).filter(
        Q(state__in=COMMITTED) | Q(active_at__isnull=False)).filter(
        start_at__lt=month_end, end_at__gt=month_start)
    if exclude_lease is not None:
        qs = qs.exclude(pk=exclude_lease)
    metered = committed = Decimal(0)
    for lease in qs.only("start_at", "end_at", "active_at", "ended_at", "gpu_count", "nodes",
                         "gpu_milli", "state", "gpu_model", "allowed_models"):
        if not _counts_for(lease, model):
            continue
        gpus = Decimal(str(lease.total_gpus))
        if lease.active_at is not None:
            stop = min(lease.ended_at or now, lease.end_at, now)
            metered += _clipped_hours(lease.active_at, stop, month_start, month_end) * gpus
        if lease.state in COMMITTED and lease.ended_at is None:
            begin = max(lease.start_at, now, lease.active_at or lease.start_at)
            committed += _clipped_hours(begin, lease.end_at, month_start, month_end) * gpus
    return HoursUsed(metered, committed)


def budget_models(tenant: Tenant, quota: Quota) -> list[str]:
    """The models whose hours a quota row's budget limits (the tenant-wide row: each model
    without its own row, each on its own, as ``quota_for`` applies it)."""
    if quota.gpu_model:
        return [quota.gpu_model]
    own = set(Quota.objects.filter(tenant=tenant).exclude(gpu_model="")
              .values_list("gpu_model", flat=True))
    from portal.inventory.catalog import CATALOG

    return [m for m in sorted(CATALOG) if m not in own]


def quota_hours_used(tenant: Tenant, quota: Quota, now: datetime) -> HoursUsed:
    """What a quota row's budget is charged with this month: its model's hours (for the
    tenant-wide row, the busiest model it limits)."""
    start, end = month_bounds(now)
    rows = [gpu_hours_used(tenant, m, start, end, now) for m in budget_models(tenant, quota)]
    return max(rows, key=lambda r: r.total, default=HoursUsed(Decimal(0), Decimal(0)))


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
