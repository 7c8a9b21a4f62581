"""Reads the pages show that other apps may or may not offer yet (billing, telemetry).

Each helper asks the owning app's selectors and returns ``None``/empty when the app or
the selector is not there, so a page shows nothing rather than breaking.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.urls import NoReverseMatch, reverse

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
    """This month's spend and forecast from the billing app, if it answers."""
    func = _selector("portal.billing.selectors", "tenant_spend_summary", "spend_summary",
                     "month_spend")
    if func is None:
        return None
    try:
        result = func(tenant=tenant)
    except Exception:  # billing is optional on this page; never break the dashboard
        return None
    if result is None:
        return None
    return result if isinstance(result, dict) else vars(result)


def billing_links() -> list[tuple[str, str]]:
    """(url name, url) of the billing pages that exist."""
    found = []
    for name in ("billing:usage", "billing:invoices", "billing:index", "billing:home",
                 "billing:budget", "billing:prices"):
        try:
            found.append((name.split(":")[1], reverse(name)))
        except NoReverseMatch:
            continue
    return found


def free_by_model() -> list[dict[str, Any]]:
    """Per GPU model: installed, schedulable and (when leasing says) free right now."""
    func = _selector("portal.leasing.selectors", "free_capacity_by_model", "availability_by_model",
                     "free_by_model")
    if func is not None:
        return list(func())
    from portal.inventory.selectors import capacity_by_model

    return [{**row, "gpus_free": row["gpus_schedulable"]} for row in capacity_by_model()]
