"""The price book: what one GPU-hour costs a tenant at a moment (docs/billing.md).

Rounding (ADR 0005): unit prices carry 4 decimals; a charge line (one lease, one hour) costs
``gpus * seconds * unit_price / 3600`` rounded ROUND_HALF_UP to the cent; an invoice is the
sum of its rounded lines. A quote (``estimate``) is the exact amount of the window, rounded
once (ADR 0108: the hourly lines of a lease that has not started cannot be known).

Currency (ADR 0108): a tenant is priced in its own currency only. A price row in that
currency wins; otherwise the base-currency price (row or default) is converted at the rate
``BILLING_FX_RATES`` names for it; a currency with neither is refused (``PriceUnavailable``)
— never a base-currency number labelled with the tenant's currency.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.utils.translation import gettext as _

from portal.billing.models import Price, TenantContract
from portal.core.errors import ApplicationError
from portal.leasing.allocation import mig_share_milli
from portal.tenants.models import Tenant

CENT = Decimal("0.01")
UNIT = Decimal("0.0001")
HOUR = timedelta(hours=1)
DEFAULT_LIST_PRICES = {"on_demand": Decimal("2.5000"), "reserved": Decimal("2.0000"),
                       "spot": Decimal("1.0000")}


# Base currency → tenant currency, per unit of base currency (operators set their own).
DEFAULT_FX_RATES = {"CNY": "7.2000", "EUR": "0.9200"}


class PriceUnavailable(ApplicationError):
    code = "price_unavailable"


def base_currency() -> str:
    return str(getattr(settings, "BILLING_BASE_CURRENCY", "USD"))


def fx_rate(currency: str) -> Decimal:
    """Units of ``currency`` per unit of the base currency (1 for the base itself)."""
    if currency == base_currency():
        return Decimal(1)
    table = getattr(settings, "BILLING_FX_RATES", None) or DEFAULT_FX_RATES
    if currency not in table:
        message = _("No prices in %(currency)s: the operator sets a price book or an "
                    "exchange rate for it.") % {"currency": currency}
        raise PriceUnavailable(message, fields={"currency": [message]})
    return Decimal(str(table[currency]))


def default_list_price(priority: str) -> Decimal:
    """The fallback list price per GPU-hour when the price book has no row."""
    table = getattr(settings, "BILLING_DEFAULT_LIST_PRICES", None) or DEFAULT_LIST_PRICES
    return Decimal(str(table.get(priority, table.get("on_demand", "2.50")))).quantize(UNIT)


def money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def line_cost(*, gpus: Decimal, seconds: int, unit_price: Decimal,
              failed_gpu_seconds: Decimal = Decimal(0)) -> Decimal:
    """One charge line's cost, rounded to the cent (the only place money is rounded): the
    GPU-seconds used less those on failed hardware (never billed, ADR 0220)."""
    return money((gpus * seconds - failed_gpu_seconds) * unit_price / Decimal(3600))


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
        self.base = base_currency()
        rows = list(Price.objects.filter(currency__in={self.currency, self.base})
                    .order_by("-effective_from"))
        self.prices = [r for r in rows if r.currency == self.currency]
        self.base_prices = [r for r in rows if r.currency == self.base]
        self.contracts = list(TenantContract.objects.filter(tenant=tenant)
                              .order_by("-effective_from"))

    @staticmethod
    def _lookup(rows: list[Price], gpu_model: str, priority: str,
                at: datetime) -> Decimal | None:
        best: Price | None = None
        for row in rows:  # newest first
            if row.priority != priority or row.effective_from > at or row.mig_profile:
                continue
            if row.gpu_model == gpu_model:
                return Decimal(row.unit_price)
            if row.gpu_model == "" and best is None:
                best = row
        return Decimal(best.unit_price) if best else None

    def list_price(self, gpu_model: str, priority: str, at: datetime) -> Decimal:
        """The tenant-currency row; else the base price converted (module docstring)."""
        own = self._lookup(self.prices, gpu_model, priority, at)
        if own is not None:
            return own
        base = self._lookup(self.base_prices, gpu_model, priority, at)
        if base is None:
            base = default_list_price(priority)
        if self.currency == self.base:
            return base
        return (base * fx_rate(self.currency)).quantize(UNIT, rounding=ROUND_HALF_UP)

    @staticmethod
    def _profile_lookup(rows: list[Price], gpu_model: str, mig_profile: str, priority: str,
                        at: datetime) -> Decimal | None:
        for row in rows:  # newest first
            if (row.gpu_model, row.mig_profile, row.priority) == (gpu_model, mig_profile,
                                                                  priority) \
                    and row.effective_from <= at:
                return Decimal(row.unit_price)
        return None

    def profile_price(self, gpu_model: str, mig_profile: str, priority: str,
                      at: datetime) -> Decimal | None:
        """The explicit price per instance-hour of a MIG profile (tenant currency, else
        the base row converted); None: derived from the slice share (ADR 0222)."""
        own = self._profile_lookup(self.prices, gpu_model, mig_profile, priority, at)
        if own is not None:
            return own
        base = self._profile_lookup(self.base_prices, gpu_model, mig_profile, priority, at)
        if base is None or self.currency == self.base:
            return base
        return (base * fx_rate(self.currency)).quantize(UNIT, rounding=ROUND_HALF_UP)

    def listed(self, gpu_model: str, priority: str, at: datetime,
               mig_profile: str = "") -> Decimal:
        """The list price per GPU-hour, or per GPU equivalent of a MIG instance: an
        explicit profile price divided by the profile's share, so that a lease of ``n``
        instances (``n`` × share GPUs) costs ``n`` × the profile price (ADR 0233)."""
        if mig_profile:
            per_instance = self.profile_price(gpu_model, mig_profile, priority, at)
            share = mig_share_milli(gpu_model, mig_profile) if per_instance is not None else 0
            if per_instance is not None and share:
                return (per_instance * 1000 / share).quantize(UNIT, rounding=ROUND_HALF_UP)
        return self.list_price(gpu_model, priority, at)

    def contract(self, gpu_model: str, priority: str, at: datetime) -> TenantContract | None:
        found = [c for c in self.contracts
                 if c.gpu_model in ("", gpu_model) and c.priority in ("", priority)
                 and c.effective_from <= at and (c.effective_to is None or at < c.effective_to)]
        found.sort(key=lambda c: (c.gpu_model != "", c.priority != "", c.effective_from),
                   reverse=True)
        return found[0] if found else None

    def rate(self, gpu_model: str, priority: str, at: datetime, mig_profile: str = "") -> Rate:
        listed = self.listed(gpu_model, priority, at, mig_profile)
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
             start: datetime, end: datetime, book: PriceBook | None = None,
             mig_profile: str = "") -> tuple[Decimal, str]:
    """What a lease of ``gpus`` GPUs during [start, end) costs at today's book: the exact
    amount over every hour's rate, rounded once to the cent (amount, currency).

    Old versions summed rounded hourly lines of whole seconds: a start with microseconds
    lost a second and the sum drifted (39.99 quoted for 2 GPUs × 8 h at 2.50).
    """
    book = book or PriceBook(tenant)
    exact = Decimal(0)
    for period_start, _end, used_from, used_to in hours(start, end):
        micros = Decimal((used_to - used_from) // timedelta(microseconds=1))
        rate = book.rate(gpu_model, priority, period_start, mig_profile)
        exact += Decimal(gpus) * micros * rate.unit_price / Decimal(3600 * 10**6)
    return money(exact), book.currency


def unit_price(*, tenant: Tenant, gpu_model: str, priority: str, at: datetime,
               mig_profile: str = "") -> Rate:
    """The rate per GPU-hour at ``at`` (what the quote and the lease page show)."""
    return PriceBook(tenant).rate(gpu_model, priority, at, mig_profile)
