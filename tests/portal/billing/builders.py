"""Lease rows as the leasing services leave them (billing reads only these fields)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from portal.leasing.models import Lease, LeaseState
from portal.tenants.models import Tenant


def make_lease(tenant: Tenant, *, active_at: datetime | None, end_at: datetime,
               ended_at: datetime | None = None, state: str | None = None, **extra: Any) -> Lease:
    start = active_at or end_at - timedelta(hours=1)
    if state is None:
        state = LeaseState.ENDED if ended_at else LeaseState.ACTIVE
    values = {"gpu_model": "H100", "allowed_models": ["H100"], "gpu_count": 1, "nodes": 1,
              "gpu_milli": 1000, "priority": "on_demand"}
    values.update(extra)
    return Lease.objects.create(tenant=tenant, start_at=start, end_at=end_at,
                                active_at=active_at, ended_at=ended_at, state=state, **values)
