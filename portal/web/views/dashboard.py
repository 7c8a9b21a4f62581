"""The dashboard: quota and budget bars, current leases, spend, free GPUs, notices."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _

from portal.leasing import states
from portal.tenants.models import Tenant
from portal.web import labels, panels
from portal.web.views._common import tenant_page

LIVE_STATES = tuple(sorted(states.LIVE))
TROUBLE_STATES = tuple(sorted(states.TROUBLE))


def _bar(used: Any, limit: Any) -> dict[str, Any]:
    used_f = float(used or 0)
    limit_f = float(limit or 0)
    pct = min(100.0, 100.0 * used_f / limit_f) if limit_f else 0.0
    return {"used": used or 0, "limit": limit, "pct": round(pct, 1),
            "level": "bad" if pct >= 90 else "warn" if pct >= 70 else "ok"}


def _first(row: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if row.get(key) is not None:
            return row[key]
    return None


def quota_rows(tenant: Tenant) -> list[dict[str, Any]]:
    """The leasing app's quota usage with a bar for GPUs and one for GPU-hours."""
    from portal.leasing.selectors import quota_usage

    rows = []
    for row in quota_usage(tenant=tenant):
        budget = _first(row, "gpu_hour_budget", "budget_hours")
        used_hours = _first(row, "gpu_hours_this_month", "used_hours")
        in_use = _first(row, "in_use_gpus", "in_use")
        rows.append({
            "model": _first(row, "gpu_model", "model"),
            "max_gpus": row.get("max_gpus"),
            "guaranteed": _first(row, "guaranteed_gpus", "guaranteed"),
            "in_use": in_use,
            "budget_hours": budget, "used_hours": used_hours,
            "metered_hours": row.get("gpu_hours_metered"),
            "committed_hours": row.get("gpu_hours_committed"),
            "gpus": _bar(in_use, row.get("max_gpus")) if in_use is not None else None,
            "hours": _bar(used_hours, budget) if budget is not None else None,
        })
    return rows


def notices(quotas: list[dict[str, Any]], trouble: list[Any]) -> list[str]:
    found = []
    for row in quotas:
        if row["gpus"] and row["gpus"]["level"] == "bad":
            found.append(_("GPU quota for %(model)s is nearly used up.")
                         % {"model": row.get("model") or _("all models")})
        if row["hours"] and row["hours"]["level"] == "bad":
            found.append(_("GPU-hour budget for %(model)s is nearly used up.")
                         % {"model": row.get("model") or _("all models")})
    for lease in trouble:
        found.append(_("Lease %(name)s: %(state)s.")
                     % {"name": str(lease), "state": labels.STATES.get(lease.state, lease.state)})
    return found


@tenant_page()
def dashboard(request: HttpRequest) -> HttpResponse:
    from portal.leasing.selectors import lease_list

    tenant = request.tenant  # type: ignore[attr-defined]
    leases = lease_list(user=request.user, tenant=tenant)
    live = list(leases.filter(state__in=LIVE_STATES).order_by("start_at")[:12])
    trouble = list(leases.filter(state__in=TROUBLE_STATES).order_by("-updated")[:3])
    quotas = quota_rows(tenant)
    return render(request, "web/dashboard.html", {
        "active": [le for le in live if le.state in states.RUNNING],
        "upcoming": [le for le in live if le.state not in states.RUNNING],
        "quotas": quotas,
        "spend": panels.spend(tenant),
        "free": panels.free_by_model(),
        "notices": notices(quotas, trouble),
    })
