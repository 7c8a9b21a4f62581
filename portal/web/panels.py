"""Reads the pages show that other apps may or may not offer yet (billing, telemetry).

Each helper asks the owning app's selectors and returns ``None``/empty when the app or
the selector is not there, so a page shows nothing rather than breaking.
"""

from __future__ import annotations

import calendar
import importlib
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.urls import reverse

from portal.core import clock
from portal.tenants.models import Tenant


def _selector(module: str, *names: str) -> Any:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    for name in names:
        func = getattr(mod, name, None)
        if callable(func):
            return func
    return None


def spend(tenant: Tenant) -> dict[str, Any] | None:
    """This month's spend and a forecast to month end, from the billing app if it answers.

    Without a forecast from billing, the forecast is the month-to-date spend extrapolated
    at the month's average rate so far (labelled as such on the page).
    """
    summary = _selector("portal.billing.selectors", "spend_summary", "month_spend")
    if summary is not None:
        result = summary(tenant=tenant)
        return result if isinstance(result, dict) else vars(result)
    totals = _selector("portal.billing.selectors", "invoice_totals")
    if totals is None:
        return None
    now = clock.now()
    month = date(now.year, now.month, 1)
    total = totals(tenant=tenant, month=month)["total"]
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    days = calendar.monthrange(now.year, now.month)[1]
    elapsed = Decimal(max((now - start).total_seconds(), 3600)) / Decimal(86400)
    forecast = (total * Decimal(days) / elapsed).quantize(Decimal("0.01"))
    return {"month_to_date": total, "forecast": max(forecast, total),
            "currency": tenant.currency, "extrapolated": True}


def export_links() -> list[tuple[str, str]]:
    """(format, url) of this month's usage exports for the active tenant."""
    now = clock.now()
    start = date(now.year, now.month, 1)
    end = (datetime(now.year, now.month, 28, tzinfo=UTC) + timedelta(days=4)).replace(day=1)
    base = reverse("billing:export")
    return [(kind, f"{base}?type={kind}&from={start:%Y-%m-%d}&to={end:%Y-%m-%d}")
            for kind in ("csv", "focus-csv", "focus-jsonl")]


def free_by_model() -> list[dict[str, Any]]:
    """Per GPU model: installed, schedulable and wholly free right now (2 queries).

    Free = schedulable (ready node, healthy GPU) and no live allocation covering now.
    Belongs in the leasing selectors; kept here until leasing offers one.
    """
    func = _selector("portal.leasing.selectors", "free_capacity_by_model",
                     "availability_by_model", "free_by_model")
    if func is not None:
        return list(func())
    from django.db.models import Count

    from portal.inventory.selectors import capacity_by_model, schedulable_gpus
    from portal.leasing.models import Allocation

    now = clock.now()
    busy = Allocation.objects.filter(live=True, start_at__lte=now, end_at__gt=now).values("gpu_id")
    free = dict(schedulable_gpus().exclude(id__in=busy).values("model")
                .annotate(n=Count("id")).values_list("model", "n"))
    return [{**row, "gpus_free": free.get(row["model"], 0)} for row in capacity_by_model()]
