"""Reads for the tenant's invoice documents (CSV and printable HTML): lines per lease.

A month's usage is stored per lease and hour; an invoice shows one line per lease, model,
priority and unit price (a price change inside the month splits a lease's line), then the
credit lines, then the totals. Totals are the sums of the rounded hourly lines (ADR 0005),
so they match ``selectors.invoice_totals`` to the cent. A draft shows its live totals.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from portal.billing import selectors
from portal.billing.models import Invoice
from portal.tenants.models import Tenant

CENT = Decimal("0.01")


@dataclass(frozen=True)
class Statement:
    invoice: Invoice
    lines: list[dict[str, Any]]
    credits: list[dict[str, Any]]
    totals: dict[str, Any]

    @property
    def is_draft(self) -> bool:
        return bool(self.invoice.status == Invoice.Status.DRAFT)


def invoice_for(*, tenant: Tenant, month: date) -> Invoice | None:
    return selectors.invoices(tenant=tenant).filter(month=month.replace(day=1)).first()


def recent_invoices(*, tenant: Tenant, limit: int = 12) -> list[dict[str, Any]]:
    """The tenant's latest invoices; a draft with its live totals (it can still change)."""
    out = []
    for invoice in selectors.invoices(tenant=tenant).order_by("-month")[:limit]:
        totals = (selectors.invoice_totals(tenant=tenant, month=invoice.month)
                  if invoice.status == Invoice.Status.DRAFT else
                  {"usage_total": invoice.usage_total, "credit_total": invoice.credit_total,
                   "total": invoice.total})
        out.append({"invoice": invoice, **totals})
    return out


def _usage_lines(tenant: Tenant, month: date) -> list[dict[str, Any]]:
    start, end = selectors.month_bounds(month)
    gpu_seconds = selectors.billed_gpu_seconds()
    rows = (selectors.usage_records(tenant=tenant, start=start, end=end).order_by()
            .values("lease_id", "lease__name", "gpu_model", "priority", "unit_price",
                    "currency", "lease__mig_profile", "lease__gpu_count")
            .annotate(gpu_seconds=Sum(gpu_seconds), cost=Sum("cost"), seconds=Sum("seconds"))
            .order_by("lease__name", "lease_id", "unit_price"))
    return [{"lease": str(r["lease_id"]), "name": r["lease__name"] or str(r["lease_id"])[:8],
             "gpu_model": r["gpu_model"], "priority": r["priority"],
             "gpu_hours": (Decimal(str(r["gpu_seconds"] or 0)) / 3600).quantize(
                 Decimal("0.001")),
             "unit_price": r["unit_price"], "currency": r["currency"],
             "cost": Decimal(str(r["cost"] or 0)).quantize(CENT),
             **_mig_line(r)} for r in rows]


def _mig_line(row: dict[str, Any]) -> dict[str, Any]:
    """A MIG lease's line names its profile and counts instance-hours (ADR 0222)."""
    profile = row["lease__mig_profile"]
    if not profile:
        return {"mig_profile": "", "instance_hours": None}
    hours = Decimal(row["seconds"] or 0) * row["lease__gpu_count"] / 3600
    return {"mig_profile": profile, "instance_hours": hours.quantize(Decimal("0.001")),
            "gpu_model": f"{row['gpu_model']} MIG {profile}"}


def statement(*, tenant: Tenant, month: date) -> Statement | None:
    invoice = invoice_for(tenant=tenant, month=month)
    if invoice is None:
        return None
    start, end = selectors.month_bounds(invoice.month)
    credits = [{"description": c.description, "category": c.category, "kind": c.kind,
                "amount": c.amount, "currency": c.currency}
               for c in selectors.credit_lines(tenant=tenant, start=start, end=end)]
    live = selectors.invoice_totals(tenant=tenant, month=invoice.month)
    totals = live if invoice.status == Invoice.Status.DRAFT else {
        "usage_total": invoice.usage_total, "credit_total": invoice.credit_total,
        "total": invoice.total}
    return Statement(invoice, _usage_lines(tenant, invoice.month), credits, totals)


def statement_csv(doc: Statement) -> tuple[str, str]:
    """(file name, CSV text) of a statement: its usage lines, credits and totals; the same
    file for the page download and the API (``GET /billing/invoices/YYYY-MM.csv``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["kind", "lease_id", "description", "gpu_model", "priority", "gpu_hours",
                     "unit_price", "amount", "currency"])
    for line in doc.lines:
        writer.writerow(["usage", line["lease"], line["name"], line["gpu_model"],
                         line["priority"], f"{line['gpu_hours']:f}", f"{line['unit_price']:f}",
                         f"{line['cost']:f}", line["currency"]])
    for credit in doc.credits:
        writer.writerow([credit["category"].lower(), "", credit["description"], "", "", "", "",
                         f"{credit['amount']:f}", credit["currency"]])
    currency = doc.invoice.currency
    for name in ("usage_total", "credit_total", "total"):
        writer.writerow([name, "", "", "", "", "", "", f"{doc.totals[name]:f}", currency])
    month = doc.invoice.month
    status = "draft" if doc.is_draft else "final"
    return (f"gpupool-invoice-{doc.invoice.tenant.slug}-{month.year:04d}-{month.month:02d}-"
            f"{status}.csv", out.getvalue())


def lease_money(lease: Any) -> dict[str, Any] | None:
    """What a lease costs, for its page: the unit price, and the cost — metered once it has
    ended (failure credits deducted), estimated for the whole window while it waits or runs.
    ``None`` for a lease that never ran and never will (cancelled, rejected). 3–4 queries."""
    from portal.billing.models import CreditLine, UsageRecord
    from portal.billing.pricing import PriceBook, estimate
    from portal.leasing.states import TERMINAL

    ended = lease.ended_at is not None or lease.state in TERMINAL
    if ended and lease.active_at is None:
        return None
    model = lease.gpu_model or next(iter(lease.allowed_models or []), "")
    book = PriceBook(lease.tenant)
    rate = book.rate(model, lease.priority, lease.active_at or lease.start_at,
                     lease.mig_profile)
    usage = UsageRecord.objects.filter(lease=lease).aggregate(
        cost=Sum("cost"), open=Count("id", filter=Q(closed=False)))
    billed = usage["cost"]
    gpus = Decimal(lease.gpu_count * lease.nodes * lease.gpu_milli) / 1000
    final = ended and billed is not None and not usage["open"]
    if final:
        credits = CreditLine.objects.filter(lease=lease).aggregate(s=Sum("amount"))["s"]
        cost = Decimal(billed) + (credits or 0)
    else:
        begin = lease.active_at or lease.start_at
        stop = max(lease.ended_at or lease.end_at, begin) if ended else lease.end_at
        cost = estimate(tenant=lease.tenant, gpu_model=model, priority=lease.priority,
                        gpus=gpus, start=begin, end=stop, book=book,
                        mig_profile=lease.mig_profile)[0]
    return {"unit_price": rate.unit_price, "currency": rate.currency, "cost": cost,
            "billed": billed, "final": final, "ended": ended, "gpus": gpus,
            "hourly": (rate.unit_price * gpus).quantize(CENT)}
