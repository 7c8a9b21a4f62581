"""The apps' news (``portal.leasing.hooks.lease_event``, ``portal.billing.hooks.
budget_alert``) as webhook payloads, queued for the tenant's endpoints that asked for them.

Receivers run after the news committed; a failure here is logged and never reaches the
code that made the news.
"""

from __future__ import annotations

import logging
from typing import Any

from portal.billing.hooks import BudgetNews
from portal.leasing.hooks import LeaseNews
from portal.leasing.models import Lease
from portal.tenants.models import Tenant
from portal.webhooks import services

log = logging.getLogger(__name__)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def lease_data(news: LeaseNews) -> dict[str, Any]:
    lease = Lease.objects.select_related("tenant").filter(pk=news.lease_id).first()
    data: dict[str, Any] = {"lease_id": news.lease_id, "state": news.state,
                            "reason": news.reason, "extra": news.data}
    if lease is not None:
        data.update({"name": lease.name, "tenant": lease.tenant.slug,
                     "gpu_model": lease.gpu_model, "gpu_count": lease.gpu_count,
                     "gpu_milli": lease.gpu_milli, "nodes": lease.nodes,
                     "start_at": _iso(lease.active_at or lease.start_at),
                     "end_at": _iso(lease.end_at), "ended_at": _iso(lease.ended_at)})
    return data


def lease_news(news: LeaseNews) -> None:
    try:
        services.messages_enqueue(tenant_id=news.tenant_id, event=news.event,
                                  data=lambda: lease_data(news))
    except Exception:
        log.exception("could not queue webhooks for %s of lease %s", news.event, news.lease_id)


def budget_news(news: BudgetNews) -> None:
    def data() -> dict[str, Any]:
        slug = Tenant.objects.filter(pk=news.tenant_id).values_list("slug", flat=True).first()
        return {"tenant": slug, "alert_id": news.alert_id, "month": news.month,
                "threshold": news.threshold, "used_gpu_hours": news.used_gpu_hours,
                "budget_gpu_hours": news.budget_gpu_hours}
    try:
        services.messages_enqueue(tenant_id=news.tenant_id, event=news.event, data=data)
    except Exception:
        log.exception("could not queue webhooks for a budget alert of %s", news.tenant_id)
