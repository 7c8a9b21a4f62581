"""GPU utilisation per lease per charge period from synthetic telemetry samples: stored on
the usage records by metering, exported as FOCUS ``x_GpuUtilizationAvg``, and shown in
showback per lease and per tenant."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command

from portal.billing import selectors
from portal.billing.metering import meter_leases
from portal.billing.models import UsageRecord
from portal.fleet.models import TelemetrySample
from portal.inventory.models import Gpu, Node
from portal.leasing.models import Allocation
from tests.portal.billing.builders import make_lease
from tests.portal.factories import make_tenant

T0 = datetime(2026, 3, 10, 10, 30, tzinfo=UTC)
H10 = datetime(2026, 3, 10, 10, tzinfo=UTC)
MIN = timedelta(minutes=1)


def _gpu(node: Node, index: int) -> Gpu:
    return Gpu.objects.create(node=node, index=index, uuid=f"GPU-{node.hostname}-{index}",
                              model="H100")


def _samples(node: Node, key: str, util: Any, start: datetime, minutes: int,
             kind: str = "gpu") -> None:
    TelemetrySample.objects.bulk_create(
        TelemetrySample(node=node, kind=kind, key=key, minute=start + i * MIN,
                        values={"gpu_util_pct": util(start + i * MIN)})
        for i in range(minutes))


@pytest.fixture
def fleet(db: Any) -> dict[str, Any]:
    a = make_tenant("util-a")
    n1 = Node.objects.create(hostname="util-n1", gpu_model="H100")
    n2 = Node.objects.create(hostname="util-n2", gpu_model="H100")
    g0, g1, other = _gpu(n1, 0), _gpu(n1, 1), _gpu(n2, 0)
    busy = make_lease(a, active_at=T0, end_at=T0 + timedelta(hours=5),
                      ended_at=T0 + timedelta(hours=2), gpu_count=2, name="busy")
    idle = make_lease(a, active_at=T0, end_at=T0 + timedelta(hours=1),
                      ended_at=T0 + timedelta(hours=1), name="no-telemetry")
    # two slots of g0 (counted once) and one of g1; end_at not moved at release (cut by
    # the billed interval)
    for gpu, slot in ((g0, 0), (g0, 1), (g1, 0)):
        Allocation.objects.create(lease=busy, gpu=gpu, node=n1, slot=slot, start_at=T0,
                                  end_at=T0 + timedelta(hours=5), live=False)
    # g0: 80 % while billed, 100 % after the release at 12:30 (must not count);
    # g1: 40 / 20 / 0 % in the hours 10, 11, 12 → period averages 60, 50, 40
    _samples(n1, "0", lambda m: 80 if m < T0 + timedelta(hours=2) else 100, H10, 240)
    _samples(n1, "1", lambda m: {10: 40, 11: 20}.get(m.hour, 0.0), H10, 240)
    _samples(n2, "0", lambda m: 100, H10, 240)  # another node's GPU 0: not allocated
    _samples(n1, "0", lambda m: 100, H10 + 30 * MIN, 1, kind="port")  # not a GPU sample
    return {"a": a, "busy": busy, "idle": idle, "other": other}


def test_metering_stores_the_hourly_average(fleet: dict[str, Any]) -> None:
    report = meter_leases(until=T0 + timedelta(days=1))
    got = dict(UsageRecord.objects.filter(lease=fleet["busy"])
               .values_list("period_start", "gpu_util_avg"))
    assert got == {H10: Decimal("60.00"), H10 + timedelta(hours=1): Decimal("50.00"),
                   H10 + timedelta(hours=2): Decimal("40.00")}
    assert set(UsageRecord.objects.filter(lease=fleet["idle"])
               .values_list("gpu_util_avg", flat=True)) == {None}
    assert report.created == 5
    again = meter_leases(until=T0 + timedelta(days=1), lease_ids=[fleet["busy"].pk])
    assert (again.created, again.updated, again.deleted) == (0, 0, 0)


def test_open_period_picks_up_samples_that_arrive_later(db: Any) -> None:
    tenant = make_tenant("util-late")
    node = Node.objects.create(hostname="util-late", gpu_model="H100")
    gpu = _gpu(node, 3)
    lease = make_lease(tenant, active_at=H10, end_at=H10 + timedelta(hours=3))
    Allocation.objects.create(lease=lease, gpu=gpu, node=node, slot=0, start_at=H10,
                              end_at=H10 + timedelta(hours=3))
    meter_leases(until=H10 + 20 * MIN)
    record = UsageRecord.objects.get(lease=lease)
    assert record.gpu_util_avg is None and not record.closed
    _samples(node, "3", lambda m: 12.5 if m.minute % 2 else 25, H10, 20)
    report = meter_leases(until=H10 + 20 * MIN)
    assert report.updated == 1
    assert UsageRecord.objects.get(lease=lease).gpu_util_avg == Decimal("18.75")


def test_focus_and_showback_carry_the_utilisation(fleet: dict[str, Any]) -> None:
    meter_leases(until=T0 + timedelta(days=1))
    out = io.StringIO()
    call_command("export_usage", format="focus-csv", tenant="util-a", start="2026-03-10",
                 end="2026-03-10", stdout=out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    by_lease: dict[str, list[str]] = {}
    for row in rows:
        by_lease.setdefault(row["ResourceName"], []).append(row["x_GpuUtilizationAvg"])
    assert by_lease == {"busy": ["60.00", "50.00", "40.00"], "no-telemetry": ["", ""]}
    out = io.StringIO()
    call_command("export_usage", format="focus-jsonl", tenant="util-a", start="2026-03-10",
                 end="2026-03-10", stdout=out)
    utils = [json.loads(x, parse_float=Decimal)["x_GpuUtilizationAvg"]
             for x in out.getvalue().splitlines()]
    assert sorted(u for u in utils if u is not None) == [40, 50, 60] and utils.count(None) == 2

    show = selectors.showback(tenant=fleet["a"])
    assert show["utilisation_available"]
    lease = {row["name"]: row for row in show["leases"]}
    # (60 × 1800 + 50 × 3600 + 40 × 1800) / 7200 GPU-seconds per GPU
    assert lease["busy"]["gpu_utilization_avg"] == Decimal("50.00")
    assert lease["busy"]["measured_gpu_hours"] == Decimal("4.000")
    assert lease["no-telemetry"]["gpu_utilization_avg"] is None
    (tenant,) = show["tenants"]
    assert tenant["tenant"] == "util-a" and tenant["leases"] == 2
    assert tenant["gpu_utilization_avg"] == Decimal("50.00")
    assert tenant["gpu_hours"] == Decimal("5.000")  # 2 GPUs × 2 h + 1 GPU × 1 h
    assert tenant["measured_gpu_hours"] == Decimal("4.000")


def test_showback_without_telemetry(db: Any) -> None:
    tenant = make_tenant("util-none")
    make_lease(tenant, active_at=H10, end_at=H10 + timedelta(hours=1),
               ended_at=H10 + timedelta(hours=1))
    meter_leases(until=H10 + timedelta(hours=2))
    show = selectors.showback(tenant=tenant)
    assert not show["utilisation_available"]
    assert show["tenants"][0]["gpu_utilization_avg"] is None
    assert show["leases"][0]["measured_gpu_hours"] == Decimal("0.000")
