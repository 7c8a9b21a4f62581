"""Writes of billing: prices, contracts, credits, invoices, budget alerts (all audited)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _

from portal.billing import hooks, selectors, sla
from portal.billing.metering import meter_leases, month_of
from portal.billing.models import BudgetAlert, CreditLine, Invoice, Price, TenantContract
from portal.billing.pricing import money
from portal.core import clock
from portal.core.errors import ApplicationError, Conflict
from portal.core.services import audit_record
from portal.leasing.allocation import mig_profiles
from portal.tenants.models import Tenant


def _on_hour(at: datetime, name: str) -> None:
    if at.minute or at.second or at.microsecond:
        raise ApplicationError(_("Prices change on hour boundaries (UTC)."),
                               fields={name: [_("must be a whole hour")]})


@transaction.atomic
def price_create(*, actor: Any, gpu_model: str, priority: str, unit_price: Decimal,
                 effective_from: datetime, currency: str = "USD",
                 mig_profile: str = "") -> Price:
    """Add a list price from ``effective_from`` on; never in the past (not retroactive).
    With ``mig_profile`` (one of the model's profiles) it is the price per instance-hour of
    that profile, over the one derived from its slice share (ADR 0233)."""
    _on_hour(effective_from, "effective_from")
    if mig_profile and mig_profile not in mig_profiles(gpu_model):
        raise ApplicationError(_("Not a MIG profile of this GPU model."),
                               fields={"mig_profile": [_("not a MIG profile of %(model)s")
                                                       % {"model": gpu_model or "*"}]})
    if effective_from < clock.now():
        raise ApplicationError(_("A price cannot take effect in the past."),
                               fields={"effective_from": [_("is in the past")]})
    price = Price.objects.create(gpu_model=gpu_model, mig_profile=mig_profile,
                                 priority=priority, currency=currency,
                                 unit_price=Decimal(unit_price), effective_from=effective_from,
                                 created_by=actor if getattr(actor, "pk", None) else None)
    audit_record(actor=actor, action="billing.price_create", obj=price,
                 changes={"unit_price": str(price.unit_price), "from": effective_from.isoformat(),
                          **({"mig_profile": mig_profile} if mig_profile else {})})
    return price


@transaction.atomic
def contract_create(*, actor: Any, tenant: Tenant, effective_from: datetime,
                    gpu_model: str = "", priority: str = "", unit_price: Decimal | None = None,
                    discount_percent: Decimal = Decimal(0), effective_to: datetime | None = None,
                    reference: str = "") -> TenantContract:
    _on_hour(effective_from, "effective_from")
    if effective_from < clock.now():
        raise ApplicationError(_("A contract cannot start in the past."),
                               fields={"effective_from": [_("is in the past")]})
    contract = TenantContract.objects.create(
        tenant=tenant, gpu_model=gpu_model, priority=priority, unit_price=unit_price,
        discount_percent=Decimal(discount_percent), effective_from=effective_from,
        effective_to=effective_to, reference=reference)
    audit_record(actor=actor, action="billing.contract_create", obj=contract, tenant=tenant,
                 changes={"unit_price": str(unit_price), "discount": str(discount_percent)})
    return contract


def _draft_month(tenant: Tenant, month: date) -> date:
    """``month`` if its invoice is still open, else the current month (corrections)."""
    if Invoice.objects.filter(tenant=tenant, month=month, status=Invoice.Status.FINAL).exists():
        return selectors.current_month()
    return month


@transaction.atomic
def credit_create(*, actor: Any, tenant: Tenant, amount: Decimal, description: str,
                  period_start: datetime, period_end: datetime,
                  category: str = CreditLine.Category.CREDIT, lease: Any = None) -> CreditLine:
    """A manual credit (negative) or adjustment; lands on the first open invoice."""
    if category == CreditLine.Category.CREDIT and amount > 0:
        raise ApplicationError(_("A credit is a negative amount."),
                               fields={"amount": [_("must be negative")]})
    source = month_of(period_start)
    line = CreditLine.objects.create(
        tenant=tenant, lease=lease, month=_draft_month(tenant, source), source_month=source,
        category=category, kind=CreditLine.Kind.MANUAL, amount=money(Decimal(amount)),
        currency=tenant.currency, description=description[:300], period_start=period_start,
        period_end=period_end, created_by=actor if getattr(actor, "pk", None) else None)
    audit_record(actor=actor, action="billing.credit_create", obj=line, tenant=tenant,
                 changes={"amount": str(line.amount), "category": category})
    return line


@transaction.atomic
def invoice_refresh(*, tenant: Tenant, month: date) -> Invoice:
    """Create or update the month's draft invoice from its lines (finals never change)."""
    month = month.replace(day=1)
    invoice, _ = Invoice.objects.select_for_update().get_or_create(
        tenant=tenant, month=month, defaults={"currency": tenant.currency})
    if invoice.status == Invoice.Status.FINAL:
        return invoice
    for name, value in selectors.invoice_totals(tenant=tenant, month=month).items():
        setattr(invoice, name, value)
    invoice.save()
    return invoice


def invoice_finalize(*, actor: Any, tenant: Tenant, month: date) -> Invoice:
    """Close the month: meter up to now, refuse while lines are open, then freeze."""
    month = month.replace(day=1)
    _start, end = selectors.month_bounds(month)
    now = clock.now()
    if now < end:
        raise Conflict(_("A month can be finalised only after it has ended."))
    meter_leases(until=now, tenant=tenant)
    return _freeze(actor=actor, tenant=tenant, month=month, end=end, now=now)


@transaction.atomic
def _freeze(*, actor: Any, tenant: Tenant, month: date, end: datetime, now: datetime) -> Invoice:
    start, _ = selectors.month_bounds(month)
    if selectors.usage_records(tenant=tenant, start=start, end=end).filter(closed=False).exists():
        raise Conflict(_("Usage of this month is still open (a lease has not settled)."))
    if not Invoice.objects.filter(tenant=tenant, month=month,
                                  status=Invoice.Status.FINAL).exists():
        sla.credit_month(tenant=tenant, month=month)  # the availability promise, settled
    invoice = invoice_refresh(tenant=tenant, month=month)
    if invoice.status == Invoice.Status.FINAL:
        return invoice
    invoice.status, invoice.finalized_at = Invoice.Status.FINAL, now
    invoice.save(update_fields=["status", "finalized_at", "updated"])
    audit_record(actor=actor, action="billing.invoice_finalize", obj=invoice, tenant=tenant,
                 changes={"total": str(invoice.total)})
    return invoice


def invoices_finalize_due(*, now: datetime) -> list[Invoice]:
    """Finalise last month's invoices of every tenant that had lines (periodic task)."""
    prev = month_of(month_of(now) - timedelta(days=1))
    done = []
    for tenant in Tenant.objects.all():
        if selectors.invoice_totals(tenant=tenant, month=prev)["line_count"]:
            try:
                done.append(invoice_finalize(actor=None, tenant=tenant, month=prev))
            except Conflict:
                continue
    return done


@transaction.atomic
def budget_check(*, tenant: Tenant, month: date) -> list[BudgetAlert]:
    """Record a BudgetAlert (once) for each threshold the month's usage has crossed."""
    usage = selectors.budget_usage(tenant=tenant, month=month)
    if usage["ratio"] is None:
        return []
    made = []
    for pct in getattr(settings, "BILLING_BUDGET_THRESHOLDS", (80, 100)):
        if usage["ratio"] * 100 < pct:
            continue
        alert, created = BudgetAlert.objects.get_or_create(
            tenant=tenant, month=month, threshold=pct,
            defaults={"used_gpu_hours": usage["used_gpu_hours"],
                      "budget_gpu_hours": usage["budget_gpu_hours"]})
        if created:
            audit_record(actor=None, action="billing.budget_alert", obj=alert, tenant=tenant,
                         changes={"threshold": pct, "used": str(usage["used_gpu_hours"])})
            hooks.budget_alert.emit_on_commit(hooks.BudgetNews(
                event="budget.alert", tenant_id=str(tenant.pk), alert_id=str(alert.pk),
                month=f"{month:%Y-%m}", threshold=pct,
                used_gpu_hours=str(alert.used_gpu_hours),
                budget_gpu_hours=str(alert.budget_gpu_hours)))
            made.append(alert)
    return made
