"""Order previews: price, earliest start, quota/budget fit and alternatives. Writes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from portal.core import clock
from portal.core.errors import ApplicationError
from portal.leasing import allocation
from portal.leasing.feasibility import check_order_fits
from portal.leasing.models import Lease
from portal.leasing.orderspec import OrderSpec, Window
from portal.leasing.services import (
    BudgetExceeded,
    _check_shape,
    _models_available,
    _window,
    check_member_limit,
    check_mig_offered,
    spec_milli,
)
from portal.leasing.services import check_limits as _limits
from portal.tenants.access import AnyUser, require_role
from portal.tenants.models import Role, Tenant


@dataclass
class QuoteResult:
    price: Decimal
    currency: str
    placeable_now: bool
    earliest_start: datetime | None
    reason: str | None
    fits_quota: bool
    fits_budget: bool
    model: str | None = None
    unit_price: Decimal | None = None  # per GPU-hour at the start, in ``currency``
    gpus: Decimal = Decimal(1)
    hours: Decimal = Decimal(0)
    start: datetime | None = None  # the window's start (later than now for a booking)
    starts_later: bool = False
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _MigProbe:
    """A MIG order's preview in the shape of the core's quote (what ``order_quote`` reads)."""

    placeable_now: bool
    placement: Any
    reason: Any
    earliest_start: int | None = None


@dataclass(frozen=True)
class _MigWhere:
    model: str


def _probe(tenant: Tenant, spec: OrderSpec, window: Window, models: list[str],
           now: datetime) -> Any:
    """Ask the core about a lease that is never saved (rolled back at once)."""
    lease = Lease(tenant=tenant, allowed_models=models, gpu_count=spec.gpu_count,
                  gpu_milli=spec.gpu_milli, nodes=spec.nodes, locality=spec.locality,
                  locality_required=spec.locality_required, priority=spec.priority,
                  start_at=window.start, end_at=window.end, created=now,
                  mig_profile=spec.mig_profile)
    if spec.mig_profile:
        found = allocation.mig_preview(lease, now)
        if isinstance(found, allocation.MigWait):
            return _MigProbe(False, None, found)
        return _MigProbe(True, _MigWhere(found[0].model), None)
    return allocation.preview(lease, now)


def _fits(actor: AnyUser, tenant: Tenant, spec: OrderSpec, window: Window,
          models: list[str]) -> tuple[bool, bool, list[str]]:
    """(fits quota, fits budget, messages); a personal limit counts as quota."""
    try:
        _limits(tenant, spec, window, models, count_pending=False)
        check_member_limit(actor, tenant, spec)
    except ApplicationError as exc:
        budget = isinstance(exc, BudgetExceeded)
        return budget, not budget, [exc.message]
    return True, True, []


def _alternatives(tenant: Tenant, spec: OrderSpec, window: Window, now: datetime,
                  chosen: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    from portal.inventory.selectors import capacity_by_model

    for row in capacity_by_model():
        model = row["model"]
        if model in chosen or row["gpus_schedulable"] < spec.gpu_count * spec.nodes:
            continue
        if _probe(tenant, spec, window, [model], now).placeable_now:
            out.append({"kind": "model", "label": _("%(count)s × %(model)s now")
                        % {"count": spec.gpu_count * spec.nodes, "model": model},
                        "spec": {"models": [model]}})
            break
    if spec.gpu_count > 1:
        smaller = replace(spec, gpu_count=max(spec.gpu_count // 2, 1))
        if _probe(tenant, smaller, window, chosen, now).placeable_now:
            out.append({"kind": "smaller", "label": _("%(count)s GPUs now")
                        % {"count": smaller.gpu_count * spec.nodes},
                        "spec": {"gpu_count": smaller.gpu_count}})
    return out


# The quote's price is billing's (``portal.billing.pricing``: ``estimate`` and
# ``unit_price``). Billing connects it at start-up (``BillingConfig.ready``), so leasing never
# imports billing, which reads leasing's models (the cycle ADR 0009 listed as debt).
_PRICING: list[Any] = []


def price_with(pricing: Any) -> None:
    """Connect the price book quotes use (a module or object with ``estimate`` and
    ``unit_price``, keyword arguments as in ``portal.billing.pricing``)."""
    _PRICING[:] = [pricing]


def _pricing() -> Any:
    if not _PRICING:
        raise RuntimeError("no pricing connected to quotes (is portal.billing installed?)")
    return _PRICING[0]


def order_quote(*, actor: AnyUser, tenant: Tenant, spec: OrderSpec) -> QuoteResult:
    require_role(actor, tenant, Role.VIEWER)
    now = clock.now()
    _check_shape(spec)
    models = _models_available(spec)
    window = _window(spec, now)
    if spec.mig_profile:
        check_mig_offered(models)
    else:
        check_order_fits(tenant=tenant, spec=spec, window=window, models=models, now=now)
    with transaction.atomic():
        result = _probe(tenant, spec, window, models, now)
        fits_quota, fits_budget, messages = _fits(actor, tenant, spec, window, models)
        model = result.placement.model if result.placement else models[0]
        gpus = Decimal(spec.gpu_count * spec.nodes * spec_milli(spec, models)) / 1000
        pricing = _pricing()
        price, currency = pricing.estimate(tenant=tenant, gpu_model=model, priority=spec.priority,
                                   gpus=gpus, start=window.start, end=window.end,
                                   mig_profile=spec.mig_profile)
        rate = pricing.unit_price(tenant=tenant, gpu_model=model, priority=spec.priority,
                          at=window.start, mig_profile=spec.mig_profile)
        earliest = allocation.from_epoch(result.earliest_start)
        alternatives = [] if result.placeable_now or spec.mig_profile else _alternatives(
            tenant, spec, window, now, models)
        if not result.placeable_now and earliest and earliest > window.start:
            later = earliest.replace(microsecond=0) + timedelta(minutes=1)
            alternatives.append({"kind": "later", "label": _("start at %(time)s UTC")
                                 % {"time": f"{later:%Y-%m-%d %H:%M}"},
                                 "spec": {"start_at": later.isoformat()}})
    return QuoteResult(price=price, currency=currency, placeable_now=result.placeable_now,
                       earliest_start=earliest, reason=result.reason.value if result.reason
                       else None, fits_quota=fits_quota, fits_budget=fits_budget, model=model,
                       unit_price=rate.unit_price, gpus=gpus,
                       hours=window.hours.quantize(Decimal("0.01")), start=window.start,
                       starts_later=window.start > now + timedelta(minutes=1),
                       alternatives=alternatives, messages=messages)
