"""Issue 27: no billed second on failed hardware, and availability SLA credits exact to the
cent that never credit a failed lease twice (ADR 0220)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from portal.billing import selectors, sla
from portal.billing.metering import MeterReport, meter_lease, meter_leases
from portal.billing.models import CreditLine, Price, TenantContract, UsageRecord
from portal.billing.pricing import money
from portal.billing.services import invoice_finalize
from portal.core import clock
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Node
from portal.leasing.models import LeaseFault, LeaseState
from tests.portal.billing.builders import make_lease
from tests.portal.factories import make_tenant

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
PRICE = Decimal("3.6000")  # per GPU-hour: one GPU-second costs 0.001


@pytest.fixture
def node(db: object) -> Node:
    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=8, model="H100"))
    Price.objects.create(gpu_model="H100", priority="on_demand", unit_price=PRICE,
                         effective_from=T0 - timedelta(days=30))
    return Node.objects.get()


def fault(lease: object, node: Node, gpus: int, at: datetime,
          replaced: datetime | None) -> LeaseFault:
    return LeaseFault.objects.create(lease=lease, node=node, gpu_indexes=list(range(gpus)),
                                     gpus=Decimal(gpus), cause="xid 79", fault_at=at,
                                     fenced_at=at, replaced_at=replaced)


def billed(lease: object) -> tuple[Decimal, Decimal]:
    rows = UsageRecord.objects.filter(lease=lease)
    seconds = sum((r.billed_gpu_seconds for r in rows), Decimal(0))
    return seconds, sum((r.cost for r in rows), Decimal(0))


def test_failed_gpus_are_not_billed_from_the_fault_to_the_replacement(node: Node) -> None:
    tenant = make_tenant("a")
    lease = make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=2),
                       ended_at=T0 + timedelta(hours=2), gpu_count=8, nodes=2)
    fault(lease, node, 8, T0 + timedelta(minutes=50), T0 + timedelta(minutes=70, seconds=7))
    meter_leases(until=T0 + timedelta(hours=3))
    seconds, cost = billed(lease)
    expected = Decimal(16 * 7200 - 8 * (20 * 60 + 7))
    assert seconds == expected
    assert cost == money(expected * PRICE / 3600)  # 0.001 per GPU-second: exact
    first, second = UsageRecord.objects.filter(lease=lease).order_by("period_start")
    assert first.failed_gpu_seconds == 8 * 600 and second.failed_gpu_seconds == 8 * 607


def test_never_replaced_failed_gpus_are_unbilled_to_the_end(node: Node) -> None:
    tenant = make_tenant("a")
    lease = make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=1),
                       ended_at=T0 + timedelta(hours=1), gpu_count=8)
    fault(lease, node, 3, T0 + timedelta(minutes=15), None)
    meter_leases(until=T0 + timedelta(hours=2))
    assert billed(lease)[0] == Decimal(8 * 3600 - 3 * 2700)


def test_a_fault_recorded_after_its_hour_closed_reopens_that_hour(node: Node) -> None:
    """An agent silent since the previous hour: the hour already metered is corrected."""
    tenant = make_tenant("a")
    lease = make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=3), gpu_count=8)
    report = MeterReport()
    meter_lease(lease_id=lease.pk, until=T0 + timedelta(hours=1, minutes=5), report=report)
    assert UsageRecord.objects.get(lease=lease, period_start=T0).closed
    fault(lease, node, 8, T0 + timedelta(minutes=59, seconds=30), None)
    meter_lease(lease_id=lease.pk, until=T0 + timedelta(hours=1, minutes=6), report=report)
    assert UsageRecord.objects.get(lease=lease, period_start=T0).failed_gpu_seconds == 8 * 30


def test_sla_credit_is_exact_and_never_credits_a_failed_lease_twice(node: Node) -> None:
    tenant = make_tenant("a")
    TenantContract.objects.create(tenant=tenant, effective_from=T0 - timedelta(days=5),
                                  availability_sla=Decimal("99.5"),
                                  sla_credit_tiers=[[99.5, 10], [99, 25], [95, 100]])
    ok = make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=10),
                    ended_at=T0 + timedelta(hours=10), gpu_count=8)
    make_lease(tenant, active_at=T0, end_at=T0 + timedelta(hours=1),
               ended_at=T0 + timedelta(hours=1), gpu_count=8, state=LeaseState.FAILED)
    fault(ok, node, 8, T0 + timedelta(hours=1), T0 + timedelta(hours=1, minutes=30))
    clock.freeze(datetime(2026, 4, 1, 1, tzinfo=UTC))
    try:
        invoice = invoice_finalize(actor=None, tenant=tenant, month=T0.date())
    finally:
        clock.reset()
    used = Decimal(8 * 36000 + 8 * 3600)
    down = Decimal(8 * 1800)
    assert sla.availability(tenant=tenant, month=T0.date()).percent == (
        (used - down) * 100 / used).quantize(Decimal("0.0001"))  # 95.4545: the 25 % tier
    usage_ok = money((8 * 36000 - down) * PRICE / 3600)
    credit = CreditLine.objects.get(tenant=tenant, kind=CreditLine.Kind.SLA)
    assert credit.amount == -money(usage_ok * Decimal(25) / 100)  # the failed lease excluded
    failure = CreditLine.objects.get(tenant=tenant, kind=CreditLine.Kind.FAILURE)
    assert failure.amount == -money(Decimal(8 * 3600) * PRICE / 3600)
    assert invoice.total == usage_ok + credit.amount
    totals = selectors.invoice_totals(tenant=tenant, month=T0.date().replace(day=1))
    assert totals["total"] == invoice.total
