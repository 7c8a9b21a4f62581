"""Metering: usage records derived only from durable lease transitions (docs/billing.md).

A lease is billed from ``active_at`` to the earliest of ``ended_at`` (or, while it runs,
now), ``end_at`` (extensions move it) and ``until``. Each hour it touched gets one
``UsageRecord`` (database-unique per lease and period). A record is *closed* once its hour
is over and the lease's billed interval in it can no longer change; open records are
recomputed on every run, so rerunning changes nothing and a crashed run is simply redone.
Leases that end FAILED (after activation) are credited in full (``CreditLine``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Exists, F, Max, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Least

from portal.billing import telemetry
from portal.billing.models import CreditLine, Invoice, UsageRecord
from portal.billing.pricing import PriceBook, hours, line_cost
from portal.leasing import states
from portal.leasing.models import LOCK, Lease, LeaseFault, LeaseState
from portal.tenants.models import Tenant

TERMINAL = sorted(states.TERMINAL)
FIELDS = ("period_end", "used_from", "used_to", "seconds", "gpus", "gpu_model", "priority",
          "currency", "list_unit_price", "unit_price", "list_cost", "cost", "closed",
          "gpu_util_avg", "failed_gpu_seconds")
MILLI_S = Decimal("0.001")
Outage = tuple[Decimal, datetime, datetime | None]  # GPUs, from, until (None: lease end)


@dataclass
class MeterReport:
    leases: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0
    credits: int = 0
    tenants: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, int]:
        return {"leases": self.leases, "created": self.created, "updated": self.updated,
                "deleted": self.deleted, "credits": self.credits}


def month_of(at: datetime | date) -> date:
    return date(at.year, at.month, 1)


def lease_gpus(lease: Lease) -> Decimal:
    return Decimal(lease.gpu_count * lease.nodes * lease.gpu_milli) / Decimal(1000)


def billed_window(lease: Lease, until: datetime) -> tuple[datetime, datetime, bool]:
    """(start, end, final): the billed interval known at ``until``; final = it is settled."""
    final = lease.ended_at is not None or lease.state in TERMINAL
    stop = lease.ended_at or (lease.updated if final else until)
    end = min(stop, lease.end_at, until)
    return lease.active_at, max(end, lease.active_at), final and stop <= until


def leases_to_meter(until: datetime, tenant: Tenant | None = None) -> QuerySet[Lease]:
    """Leases whose usage is not yet complete: running ones and ended ones not closed out."""
    qs = Lease.objects.filter(active_at__isnull=False, active_at__lt=until)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    closed_to = Max("usage_records__period_end", filter=Q(usage_records__closed=True))
    credited = CreditLine.objects.filter(lease=OuterRef("pk"), kind=CreditLine.Kind.FAILURE)
    settled = Q(ended_at__isnull=False) | Q(state__in=TERMINAL)
    return (qs.exclude(ended_at__lte=F("active_at"))
            .annotate(closed_to=closed_to, credited=Exists(credited))
            .filter(~settled | Q(closed_to__isnull=True)
                    | Q(closed_to__lt=Least("ended_at", "end_at"))
                    | Q(state=LeaseState.FAILED, credited=False))
            .select_related("tenant").order_by("active_at", "id"))


def _final_months(tenant: Tenant) -> set[date]:
    return set(Invoice.objects.filter(tenant=tenant, status=Invoice.Status.FINAL)
               .values_list("month", flat=True))


def outages(lease: Lease) -> list[Outage]:
    """The lease's failed hardware (``LeaseFault``): from the fault until its replacement
    was active — or, never replaced, to the end of the lease (ADR 0220)."""
    return [(f.gpus, f.fault_at, f.replaced_at)
            for f in LeaseFault.objects.filter(lease=lease).only("gpus", "fault_at",
                                                                  "replaced_at")]


def failed_gpu_seconds(outages: list[Outage], used_from: datetime,
                       used_to: datetime) -> Decimal:
    """GPU-seconds of ``[used_from, used_to)`` on failed hardware (at most the whole)."""
    total = Decimal(0)
    for gpus, start, until in outages:
        lo, hi = max(start, used_from), min(until or used_to, used_to)
        if hi > lo:
            total += gpus * Decimal(str((hi - lo).total_seconds()))
    return total.quantize(MILLI_S)


def _late_faults(lease: Lease) -> list[tuple[datetime, datetime]]:
    """(fault_at, recorded) of each fault: one recorded after an hour was closed (an agent
    silent since the previous hour) opens that hour again."""
    return list(LeaseFault.objects.filter(lease=lease).values_list("fault_at", "created"))


def _reopened(record: UsageRecord, late: list[tuple[datetime, datetime]]) -> bool:
    return any(at < record.period_end and made > record.updated for at, made in late)


def _values(lease: Lease, book: PriceBook, span: tuple, closed: bool,
            util: Decimal | None = None, down: list[Outage] | None = None) -> dict:
    period_start, period_end, used_from, used_to = span
    seconds = int((used_to - used_from).total_seconds())
    gpus = lease_gpus(lease)
    failed = min(failed_gpu_seconds(down or [], used_from, used_to), gpus * seconds)
    rate = book.rate(lease.gpu_model, lease.priority, period_start, lease.mig_profile)
    return {"period_end": period_end, "used_from": used_from, "used_to": used_to,
            "seconds": seconds, "gpus": gpus, "gpu_model": lease.gpu_model,
            "priority": lease.priority, "currency": rate.currency,
            "list_unit_price": rate.list_unit_price, "unit_price": rate.unit_price,
            "list_cost": line_cost(gpus=gpus, seconds=seconds, unit_price=rate.list_unit_price,
                                   failed_gpu_seconds=failed),
            "cost": line_cost(gpus=gpus, seconds=seconds, unit_price=rate.unit_price,
                              failed_gpu_seconds=failed),
            "closed": closed, "gpu_util_avg": util, "failed_gpu_seconds": failed}


def _same(record: UsageRecord, values: dict) -> bool:
    return all(getattr(record, name) == values[name] for name in FIELDS)


@transaction.atomic
def meter_lease(*, lease_id: object, until: datetime, report: MeterReport,
                book: PriceBook | None = None) -> None:
    """Bring one lease's usage records up to ``until`` (idempotent; locks the lease row)."""
    lease = Lease.objects.select_for_update(**LOCK).select_related("tenant").get(pk=lease_id)
    if lease.active_at is None:
        return
    book = book or PriceBook(lease.tenant)
    final_months = _final_months(lease.tenant)
    start, end, final = billed_window(lease, until)
    existing = {r.period_start: r for r in UsageRecord.objects.filter(lease=lease)}
    seen = set()
    todo = []
    late = _late_faults(lease)
    for span in hours(start, end):
        seen.add(span[0])
        record = existing.get(span[0])
        if (record is not None and record.closed and not _reopened(record, late)) \
                or month_of(span[0]) in final_months:
            continue
        todo.append((span, record))
    util = telemetry.period_utilisation(lease.pk, [(s[0], s[2], s[3]) for s, _r in todo])
    down = outages(lease) if todo else []
    for span, record in todo:
        closed = span[1] <= until and (final or span[1] <= end)
        values = _values(lease, book, span, closed, util.get(span[0]), down)
        if record is None:
            UsageRecord.objects.create(lease=lease, tenant=lease.tenant,
                                       period_start=span[0], **values)
            report.created += 1
        elif not _same(record, values):
            UsageRecord.objects.filter(pk=record.pk).update(**values)
            report.updated += 1
    stale = [r.pk for p, r in existing.items() if p not in seen and not r.closed
             and month_of(p) not in final_months]
    if stale:
        report.deleted += UsageRecord.objects.filter(pk__in=stale).delete()[0]
    if final and lease.state == LeaseState.FAILED:
        report.credits += _credit_failure(lease, until, final_months)
    report.leases += 1
    report.tenants.add(str(lease.tenant_id))


def _credit_failure(lease: Lease, until: datetime, final_months: set[date]) -> int:
    """A lease that failed after activation is not billed: credit its usage, per month."""
    made = 0
    months = (UsageRecord.objects.filter(lease=lease)
              .values_list("period_start", flat=True))
    for source in sorted({month_of(p) for p in months}):
        if CreditLine.objects.filter(lease=lease, kind=CreditLine.Kind.FAILURE,
                                     source_month=source).exists():
            continue
        rows = UsageRecord.objects.filter(lease=lease, period_start__year=source.year,
                                          period_start__month=source.month)
        agg = rows.aggregate(cost=Sum("cost"))
        first = rows.order_by("period_start").first()
        target = source if source not in final_months else month_of(until)
        CreditLine.objects.create(
            tenant=lease.tenant, lease=lease, month=target, source_month=source,
            category=CreditLine.Category.CREDIT, kind=CreditLine.Kind.FAILURE,
            amount=-(agg["cost"] or Decimal(0)), currency=lease.tenant.currency,
            description=f"Lease {lease.short_id} failed: usage credited",
            period_start=first.period_start, period_end=rows.order_by("-period_end")
            .first().period_end)
        made += 1
    return made


def meter_leases(*, until: datetime, tenant: Tenant | None = None,
                 lease_ids: Iterable[object] | None = None,
                 pause: float = 0.0) -> MeterReport:
    """Meter every incomplete lease up to ``until``; one short transaction per lease."""
    report = MeterReport()
    ids = list(lease_ids) if lease_ids is not None else list(
        leases_to_meter(until, tenant).values_list("id", flat=True).distinct())
    books: dict[object, PriceBook] = {}
    for lease_id in ids:
        tenant_id = Lease.objects.filter(pk=lease_id).values_list("tenant_id", flat=True)[0]
        if tenant_id not in books:
            books[tenant_id] = PriceBook(Tenant.objects.get(pk=tenant_id))
        meter_lease(lease_id=lease_id, until=until, report=report, book=books[tenant_id])
        if pause:
            time.sleep(pause)
    return report
