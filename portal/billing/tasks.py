"""Celery tasks of billing: thin, idempotent, safe to run late, twice or after a crash.

Beat entries to wire (periodic catch-up): ``billing.meter_usage`` every 5 minutes and
``billing.finalize_invoices`` hourly. Metering reads only PostgreSQL, so losing Redis
(queued tasks, results) loses nothing: the next run redoes whatever is incomplete.
"""

from __future__ import annotations

from celery import shared_task

from portal.billing import services
from portal.billing.metering import meter_leases
from portal.billing.selectors import current_month
from portal.core import clock
from portal.tenants.models import Tenant

METER_TASK = "billing.meter_usage"
FINALIZE_TASK = "billing.finalize_invoices"


@shared_task(name=METER_TASK, acks_late=True, reject_on_worker_lost=True,
             time_limit=600, soft_time_limit=540)
def meter_usage(lease_ids: list[str] | None = None) -> dict[str, int]:
    """Meter incomplete leases up to now (all, or ``lease_ids``), then check budgets."""
    report = meter_leases(until=clock.now(), lease_ids=lease_ids)
    month = current_month()
    for tenant in Tenant.objects.filter(pk__in=report.tenants):
        services.budget_check(tenant=tenant, month=month)
        services.invoice_refresh(tenant=tenant, month=month)
    return report.as_dict()


@shared_task(name=FINALIZE_TASK, acks_late=True, reject_on_worker_lost=True,
             time_limit=900, soft_time_limit=840)
def finalize_invoices() -> int:
    return len(services.invoices_finalize_due(now=clock.now()))
