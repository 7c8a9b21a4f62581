"""Availability SLA credits, computed when a month's invoice closes (ADR 0220).

A tenant's contract may promise a monthly availability (``TenantContract.availability_sla``,
e.g. 99.5 %) with credit tiers (``sla_credit_tiers``: ``[[below_percent, credit_percent],
…]``, as GPU clouds publish them). The month's availability is the share of its leased
GPU-seconds that were not on failed hardware (``UsageRecord.failed_gpu_seconds``, already
unbilled). Below a tier's threshold the tenant is credited that percentage of the month's
net charge — its usage less the whole-lease failure credits of that month, so nothing is
credited twice — rounded once to the cent, as one ``CreditLine`` of kind ``sla``
(``ChargeCategory`` Credit in the FOCUS export), at most one per tenant and month.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import DecimalField, ExpressionWrapper, F, Q, Sum

from portal.billing import selectors
from portal.billing.models import CreditLine, TenantContract
from portal.billing.pricing import money
from portal.tenants.models import Tenant

DEFAULT_TIERS = ((Decimal("99.0"), Decimal(25)), (Decimal("95.0"), Decimal(100)))
HUNDRED = Decimal(100)


@dataclass(frozen=True)
class MonthAvailability:
    used_gpu_seconds: Decimal
    failed_gpu_seconds: Decimal

    @property
    def percent(self) -> Decimal:
        if not self.used_gpu_seconds:
            return HUNDRED
        up = self.used_gpu_seconds - self.failed_gpu_seconds
        return (up * HUNDRED / self.used_gpu_seconds).quantize(Decimal("0.0001"))


def availability(*, tenant: Tenant, month: date) -> MonthAvailability:
    start, end = selectors.month_bounds(month)
    gross = ExpressionWrapper(F("gpus") * F("seconds"),
                              output_field=DecimalField(max_digits=20, decimal_places=3))
    row = selectors.usage_records(tenant=tenant, start=start, end=end).aggregate(
        used=Sum(gross), failed=Sum("failed_gpu_seconds"))
    return MonthAvailability(Decimal(str(row["used"] or 0)), Decimal(str(row["failed"] or 0)))


def contract_for(*, tenant: Tenant, month: date) -> TenantContract | None:
    """The contract with an SLA in force at the month's start (the latest such)."""
    start, end = selectors.month_bounds(month)
    return (TenantContract.objects.filter(tenant=tenant, availability_sla__isnull=False,
                                          effective_from__lt=end)
            .filter(Q(effective_to__isnull=True) | Q(effective_to__gt=start))
            .order_by("-effective_from").first())


def tiers_of(contract: TenantContract) -> list[tuple[Decimal, Decimal]]:
    """(below percent, credit percent), from the contract or: 10 % below its promise, then
    the default tiers under it."""
    if contract.sla_credit_tiers:
        return [(Decimal(str(b)), Decimal(str(c))) for b, c in contract.sla_credit_tiers]
    promise = Decimal(str(contract.availability_sla))
    return [(promise, Decimal(10)), *[(b, c) for b, c in DEFAULT_TIERS if b < promise]]


def credit_percent(percent: Decimal, tiers: list[tuple[Decimal, Decimal]]) -> Decimal:
    """The largest credit among the tiers whose threshold the availability is below."""
    return max((credit for below, credit in tiers if percent < below), default=Decimal(0))


def net_charge(*, tenant: Tenant, month: date) -> Decimal:
    """The month's usage less its whole-lease failure credits (what an SLA credit is of)."""
    totals = selectors.invoice_totals(tenant=tenant, month=month)
    failure = CreditLine.objects.filter(tenant=tenant, month=month,
                                        kind=CreditLine.Kind.FAILURE).aggregate(
        s=Sum("amount"))["s"] or Decimal(0)
    return max(Decimal(totals["usage_total"]) + failure, Decimal(0))


def credit_month(*, tenant: Tenant, month: date) -> CreditLine | None:
    """Create the month's SLA credit if its availability fell below a tier (idempotent)."""
    month = month.replace(day=1)
    existing = CreditLine.objects.filter(tenant=tenant, source_month=month,
                                         kind=CreditLine.Kind.SLA).first()
    contract = contract_for(tenant=tenant, month=month)
    if existing is not None or contract is None:
        return existing
    measured = availability(tenant=tenant, month=month)
    share = credit_percent(measured.percent, tiers_of(contract))
    amount = money(net_charge(tenant=tenant, month=month) * share / HUNDRED)
    if not amount:
        return None
    start, end = selectors.month_bounds(month)
    return CreditLine.objects.create(
        tenant=tenant, month=month, source_month=month, category=CreditLine.Category.CREDIT,
        kind=CreditLine.Kind.SLA, amount=-amount, currency=tenant.currency,
        period_start=start, period_end=end,
        description=(f"Availability {measured.percent}% below the {contract.availability_sla}% "
                     f"SLA: {share}% credit")[:300])
