"""Reads of billing data. Tenant-scoped: callers pass a tenant resolved by the access gate
(``portal.tenants.access``) or ``None`` for staff-wide views."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, DecimalField, ExpressionWrapper, F, Q, QuerySet, Sum

from portal.billing.models import BudgetAlert, CreditLine, Invoice, UsageRecord
from portal.core.clock import now
from portal.leasing.models import Quota
from portal.tenants.access import scope
from portal.tenants.models import Tenant


def month_bounds(month: date) -> tuple[datetime, datetime]:
    start = datetime.combine(month.replace(day=1), time(), tzinfo=UTC)
    nxt = (start + timedelta(days=32)).replace(day=1)
    return start, nxt


def usage_records(*, tenant: Tenant | None, start: datetime | None = None,
                  end: datetime | None = None) -> QuerySet[UsageRecord]:
    """Usage lines whose charge period starts in [start, end), oldest first."""
    qs = UsageRecord.objects.all()
    if tenant is not None:
        qs = scope(qs, tenant)
    if start is not None:
        qs = qs.filter(period_start__gte=start)
    if end is not None:
        qs = qs.filter(period_start__lt=end)
    return qs.order_by("period_start", "id")


def credit_lines(*, tenant: Tenant | None, start: datetime | None = None,
                 end: datetime | None = None) -> QuerySet[CreditLine]:
    """Credit/adjustment lines of the invoice months that start in [start, end)."""
    qs = CreditLine.objects.all()
    if tenant is not None:
        qs = scope(qs, tenant)
    if start is not None:
        qs = qs.filter(month__gte=start.date())
    if end is not None:
        qs = qs.filter(month__lt=end.date())
    return qs.order_by("month", "id")


def invoice_totals(*, tenant: Tenant, month: date) -> dict[str, Any]:
    """Live totals of a month: sum of the rounded usage lines plus the credit lines."""
    start, end = month_bounds(month)
    usage = usage_records(tenant=tenant, start=start, end=end)
    credits = scope(CreditLine.objects.filter(month=month), tenant)
    u = usage.aggregate(total=Sum("cost"))["total"] or Decimal("0.00")
    c = credits.aggregate(total=Sum("amount"))["total"] or Decimal("0.00")
    u, c = Decimal(u).quantize(Decimal("0.01")), Decimal(c).quantize(Decimal("0.01"))
    return {"usage_total": u, "credit_total": c, "total": u + c,
            "line_count": usage.count() + credits.count()}


def invoices(*, tenant: Tenant | None) -> QuerySet[Invoice]:
    qs = Invoice.objects.select_related("tenant")
    return scope(qs, tenant) if tenant is not None else qs


def gpu_hours(qs: QuerySet[UsageRecord]) -> Decimal:
    total = qs.aggregate(s=Sum(billed_gpu_seconds()))["s"] or 0
    return (Decimal(str(total)) / Decimal(3600)).quantize(Decimal("0.001"))


def budget_usage(*, tenant: Tenant, month: date) -> dict[str, Any]:
    """GPU-hours used in ``month`` against the tenant-wide quota budget."""
    start, end = month_bounds(month)
    used = gpu_hours(usage_records(tenant=tenant, start=start, end=end))
    quota = Quota.objects.filter(tenant=tenant, gpu_model="").first()
    budget = quota.gpu_hour_budget if quota is not None else None
    ratio = (used / budget) if budget else None
    warn_at = Decimal(str(getattr(settings, "BILLING_BUDGET_WARN_RATIO", "0.8")))
    return {"month": month.isoformat(), "used_gpu_hours": used, "budget_gpu_hours": budget,
            "ratio": ratio.quantize(Decimal("0.0001")) if ratio is not None else None,
            "warn": ratio is not None and ratio >= warn_at,
            "exceeded": ratio is not None and ratio >= 1,
            "alerts": list(BudgetAlert.objects.filter(tenant=tenant, month=month)
                           .values_list("threshold", flat=True))}


def current_month() -> date:
    at = now()
    return date(at.year, at.month, 1)


def billed_gpu_seconds() -> ExpressionWrapper:
    """GPU-seconds billed: used, less those on failed hardware (ADR 0220). The one home of
    this sum for budgets, invoices and exports."""
    return ExpressionWrapper(F("gpus") * F("seconds") - F("failed_gpu_seconds"),
                             output_field=DecimalField(max_digits=20, decimal_places=3))


def _gross_gpu_seconds() -> ExpressionWrapper:
    return ExpressionWrapper(F("gpus") * F("seconds"),
                             output_field=DecimalField(max_digits=20, decimal_places=3))


def _utilisation_sums() -> dict[str, Sum]:
    """Sums for a GPU-second-weighted mean of the hourly ``gpu_util_avg`` (measured hours)."""
    measured = Q(gpu_util_avg__isnull=False)
    weighted = ExpressionWrapper(F("gpu_util_avg") * F("gpus") * F("seconds"),
                                 output_field=DecimalField(max_digits=30, decimal_places=5))
    return {"util_weighted": Sum(weighted, filter=measured),
            "measured_seconds": Sum(_gross_gpu_seconds(), filter=measured)}


def _utilisation(row: dict[str, Any]) -> tuple[Decimal | None, Decimal]:
    """(average utilisation %, measured GPU-hours) of an aggregated row."""
    measured = Decimal(str(row["measured_seconds"] or 0))
    hours = (measured / 3600).quantize(Decimal("0.001"))
    if not measured:
        return None, hours
    avg = Decimal(str(row["util_weighted"])) / measured
    return avg.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP), hours


def showback(*, tenant: Tenant | None, start: datetime | None = None,
             end: datetime | None = None, limit: int = 500) -> dict[str, Any]:
    """Paid GPU-hours and cost per lease and per tenant, against the measured average GPU
    utilisation: the mean of the hourly ``UsageRecord.gpu_util_avg`` weighted by GPU-seconds,
    over the hours that have telemetry (``measured_gpu_hours``); ``None`` without any."""
    qs = usage_records(tenant=tenant, start=start, end=end).order_by()
    per_lease = (qs.values("lease_id", "lease__name", "tenant__slug", "gpu_model",
                           "priority", "currency")
                 .annotate(gpu_seconds=Sum(billed_gpu_seconds()), cost=Sum("cost"),
                           **_utilisation_sums())
                 .order_by("-cost")[:limit])
    per_tenant = (qs.values("tenant__slug", "currency")
                  .annotate(gpu_seconds=Sum(billed_gpu_seconds()), cost=Sum("cost"),
                            leases=Count("lease_id", distinct=True), **_utilisation_sums())
                  .order_by("tenant__slug", "currency"))
    leases, tenants, measured_any = [], [], False
    for row in per_lease:
        hours = (Decimal(str(row["gpu_seconds"] or 0)) / 3600).quantize(Decimal("0.001"))
        cost = Decimal(str(row["cost"] or 0)).quantize(Decimal("0.01"))
        util, measured = _utilisation(row)
        measured_any |= util is not None
        leases.append({"lease": str(row["lease_id"]), "name": row["lease__name"],
                       "tenant": row["tenant__slug"], "gpu_model": row["gpu_model"],
                       "priority": row["priority"], "gpu_hours": hours, "cost": cost,
                       "currency": row["currency"], "gpu_utilization_avg": util,
                       "measured_gpu_hours": measured})
    for row in per_tenant:
        util, measured = _utilisation(row)
        measured_any |= util is not None
        tenants.append({
            "tenant": row["tenant__slug"], "currency": row["currency"],
            "gpu_hours": (Decimal(str(row["gpu_seconds"] or 0)) / 3600).quantize(
                Decimal("0.001")),
            "cost": Decimal(str(row["cost"] or 0)).quantize(Decimal("0.01")),
            "leases": row["leases"], "gpu_utilization_avg": util,
            "measured_gpu_hours": measured})
    return {"leases": leases, "tenants": tenants, "utilisation_available": measured_any}
