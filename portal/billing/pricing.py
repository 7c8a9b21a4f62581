"""The price book: what one GPU-hour costs a tenant at a moment (docs/billing.md).

Rounding (ADR 0005): unit prices carry 4 decimals; a charge line (one lease, one hour) costs
``gpus * seconds * unit_price / 3600`` rounded ROUND_HALF_UP to the cent; every total
(estimate, invoice) is the sum of its rounded lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings

from portal.billing.models import Price, TenantContract
from portal.tenants.models import Tenant

CENT = Decimal("0.01")
UNIT = Decimal("0.0001")
HOUR = timedelta(hours=1)
DEFAULT_LIST_PRICES = {"on_demand": Decimal("2.5000"), "reserved": Decimal("2.0000"),
                       "spot": Decimal("1.0000")}


def default_list_price(priority: str) -> Decimal:
    """The fallback list price per GPU-hour when the price book has no row."""
    table = getattr(settings, "BILLING_DEFAULT_LIST_PRICES", None) or DEFAULT_LIST_PRICES
    return Decimal(str(table.get(priority, table.get("on_demand", "2.50")))).quantize(UNIT)


def money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def line_cost(*, gpus: Decimal, seconds: int, unit_price: Decimal) -> Decimal:
    """One charge line's cost, rounded to the cent (the only place money is rounded)."""
    return money(gpus * seconds * unit_price / Decimal(3600))


def hour_floor(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


Span = tuple[datetime, datetime, datetime, datetime]


def hours(start: datetime, end: datetime) -> Iterator[Span]:
    """``(period_start, period_end, used_from, used_to)`` for every hour touching [start, end)."""
    period = hour_floor(start)
    while period < end:
        nxt = period + HOUR
        yield period, nxt, max(start, period), min(end, nxt)
        period = nxt


@dataclass(frozen=True)
class Rate:
    list_unit_price: Decimal
    unit_price: Decimal
    currency: str


class PriceBook:
    """Price rows for one tenant, loaded once; ``rate`` answers for any moment in memory."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.currency = tenant.currency
        self.prices = list(Price.objects.filter(currency=self.currency)
                           .order_by("-effective_from"))
        self.contracts = list(TenantContract.objects.filter(tenant=tenant)
                              .order_by("-effective_from"))

    def list_price(self, gpu_model: str, priority: str, at: datetime) -> Decimal:
        best: Price | None = None
        for row in self.prices:  # newest first
            if row.priority != priority or row.effective_from > at:
                continue
            if row.gpu_model == gpu_model:
                return row.unit_price
            if row.gpu_model == "" and best is None:
                best = row
        return best.unit_price if best else default_list_price(priority)

    def contract(self, gpu_model: str, priority: str, at: datetime) -> TenantContract | None:
        found = [c for c in self.contracts
                 if c.gpu_model in ("", gpu_model) and c.priority in ("", priority)
                 and c.effective_from <= at and (c.effective_to is None or at < c.effective_to)]
        found.sort(key=lambda c: (c.gpu_model != "", c.priority != "", c.effective_from),
                   reverse=True)
        return found[0] if found else None

    def rate(self, gpu_model: str, priority: str, at: datetime) -> Rate:
        listed = self.list_price(gpu_model, priority, at)
        contract = self.contract(gpu_model, priority, at)
        if contract is None:
            unit = listed
        elif contract.unit_price is not None:
            unit = contract.unit_price
        else:
            factor = (Decimal(100) - contract.discount_percent) / Decimal(100)
            unit = (listed * factor).quantize(UNIT, rounding=ROUND_HALF_UP)
        return Rate(listed, unit, self.currency)


def estimate(*, tenant: Tenant, gpu_model: str, priority: str, gpus: Decimal,
             start: datetime, end: datetime) -> tuple[Decimal, str]:
    """What a lease of ``gpus`` GPUs during [start, end) would cost: (amount, currency).

    Exactly what metering would charge if the lease ran the whole period at today's book.
    """
    book = PriceBook(tenant)
    total = Decimal("0.00")
    for period_start, _end, used_from, used_to in hours(start, end):
        seconds = int((used_to - used_from).total_seconds())
        rate = book.rate(gpu_model, priority, period_start)
        total += line_cost(gpus=Decimal(gpus), seconds=seconds, unit_price=rate.unit_price)
    return total, book.currency
