"""Reads of billing data. Tenant-scoped: callers pass a tenant resolved by the access gate
(``portal.tenants.access``) or ``None`` for staff-wide views."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import DecimalField, ExpressionWrapper, F, QuerySet, Sum

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
    expr = ExpressionWrapper(F("gpus") * F("seconds"),
                             output_field=DecimalField(max_digits=20, decimal_places=3))
    total = qs.aggregate(s=Sum(expr))["s"] or 0
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


def showback(*, tenant: Tenant | None, start: datetime | None = None,
             end: datetime | None = None, limit: int = 500) -> dict[str, Any]:
    """Paid GPU-hours and cost per lease and per tenant, with measured utilisation."""
    from portal.billing.telemetry import lease_utilisation

    qs = usage_records(tenant=tenant, start=start, end=end)
    expr = ExpressionWrapper(F("gpus") * F("seconds"),
                             output_field=DecimalField(max_digits=20, decimal_places=3))
    util = lease_utilisation(tenant=tenant, start=start, end=end)
    per_lease = (qs.order_by().values("lease_id", "lease__name", "tenant__slug", "gpu_model",
                                      "priority", "currency")
                 .annotate(gpu_seconds=Sum(expr), cost=Sum("cost"))
                 .order_by("-cost")[:limit])
    leases, tenants = [], {}
    for row in per_lease:
        hours = (Decimal(str(row["gpu_seconds"] or 0)) / 3600).quantize(Decimal("0.001"))
        cost = Decimal(str(row["cost"] or 0)).quantize(Decimal("0.01"))
        leases.append({"lease": str(row["lease_id"]), "name": row["lease__name"],
                       "tenant": row["tenant__slug"], "gpu_model": row["gpu_model"],
                       "priority": row["priority"], "gpu_hours": hours, "cost": cost,
                       "currency": row["currency"],
                       "gpu_utilization_avg": util.get(row["lease_id"])})
        t = tenants.setdefault(row["tenant__slug"], {"tenant": row["tenant__slug"],
                                                     "gpu_hours": Decimal(0),
                                                     "cost": Decimal(0), "leases": 0})
        t["gpu_hours"] += hours
        t["cost"] += cost
        t["leases"] += 1
    return {"leases": leases, "tenants": list(tenants.values()),
            "utilisation_available": bool(util)}
