"""Average GPU utilisation per lease, from agent telemetry when the fleet app records it.

``portal.fleet`` does not store GPU telemetry yet; until it does this returns ``{}`` and
exports leave ``x_GpuUtilizationAvg`` empty. Wire the query here (one place) when the model
lands: expected shape ``{lease_id: Decimal percent}``.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.apps import apps

from portal.tenants.models import Tenant


def telemetry_model() -> Any:
    for name in ("GpuTelemetry", "GpuSample", "Telemetry"):
        try:
            return apps.get_model("fleet", name)
        except LookupError:
            continue
    return None


def lease_utilisation(*, tenant: Tenant | None, start: datetime | None = None,
                      end: datetime | None = None) -> dict[Any, Decimal]:
    """``{lease_id: average utilisation %}``; empty while no telemetry model exists."""
    model = telemetry_model()
    if model is None:
        return {}
    field_names = {f.name for f in model._meta.get_fields()}
    if not {"lease", "gpu_util"} <= field_names:
        return {}
    from django.db.models import Avg

    qs = model.objects.exclude(lease=None)
    if tenant is not None:
        qs = qs.filter(lease__tenant=tenant)
    return {row["lease_id"]: Decimal(str(round(row["avg"], 2)))
            for row in qs.values("lease_id").annotate(avg=Avg("gpu_util"))}
