from __future__ import annotations

from decimal import Decimal
from typing import Any

from portal.fleet.models import GpuTelemetry
from portal.leasing import services
from portal.leasing.models import Allocation
from portal.leasing.simulation import simulate_telemetry
from tests.portal.leasing.conftest import drive


def test_simulated_agents_report_busy_gpus_of_active_leases(pool: dict[str, Any]) -> None:
    spec = services.OrderSpec(models=["H100"], gpu_count=4, duration_hours=Decimal(1))
    lease = services.order_create(actor=pool["alice"], tenant=pool["a"], spec=spec)
    drive()
    assert simulate_telemetry() == 1
    busy = set(Allocation.objects.filter(lease=lease).values_list("gpu__index", flat=True))
    rows = {t.index: t.data for t in GpuTelemetry.objects.all()}
    assert len(rows) == 8
    for index, data in rows.items():
        assert (data["gpu_util_pct"] > 50) == (index in busy)
    assert simulate_telemetry() == 1  # next seq, accepted again
