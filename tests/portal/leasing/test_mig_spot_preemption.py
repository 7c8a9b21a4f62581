"""Issue 28 with spot work (ADR 0241): a MIG order that finds no free placement preempts
spot MIG instances — the fewest whose slices it needs — or a spot whole-GPU lease on a
dynamic GPU, as whole-GPU orders preempt spot work: running victims get their notice and
the order starts after it (at once with a grace of 0). A spot MIG order preempts nothing.
Before, such an order waited ``mig_full`` behind spot work."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from portal.core import clock
from portal.inventory.models import Gpu, Node
from portal.leasing import services
from portal.leasing.models import Lease
from portal.leasing.models import LeaseState as S
from portal.leasing.selectors import mig_devices
from tests.portal.leasing import test_mig_orders as orders
from tests.portal.leasing.conftest import drive

mig_pool = orders.mig_pool  # the fixture: one H100 node, GPU 0 offered for MIG


def _fresh(leases: list[Lease]) -> list[Lease]:
    for lease in leases:
        lease.refresh_from_db()
    return leases


def _seven_spot(pool: dict[str, Any]) -> list[Lease]:
    spot = [orders.order(pool, n, priority="spot") for n in range(7)]
    drive()
    assert [x.state for x in _fresh(spot)] == [S.ACTIVE] * 7
    return spot


def test_an_on_demand_mig_order_preempts_the_fewest_spot_instances(
        mig_pool: dict[str, Any], frozen_clock: Any) -> None:
    spot = _seven_spot(mig_pool)
    big = orders.order(mig_pool, 7, profile="3g.40gb")
    drive()
    big.refresh_from_db()
    # starts after the victims' notice (GPUPOOL_PREEMPT_GRACE_S, 120 s)
    assert big.state == S.SCHEDULED and big.start_at == frozen_clock + timedelta(seconds=120)
    noticed = [x for x in _fresh(spot) if x.release_kind == S.PREEMPTED]
    # 3g.40gb at slot 4 covers the instances at 4, 5, 6 only (slot 0 would take four)
    assert len(noticed) == 3 and {mig_devices(x)[0]["start"] for x in noticed} == {4, 5, 6}
    clock.freeze(frozen_clock + timedelta(seconds=121))
    drive(6)
    big.refresh_from_db()
    assert big.state == S.ACTIVE
    (device,) = mig_devices(big)
    assert (device["gpu_index"], device["start"]) == (0, 4)
    states = [x.state for x in _fresh(spot)]
    assert states.count(S.PREEMPTED) == 3 and states.count(S.ACTIVE) == 4


def test_with_no_grace_the_spot_instance_goes_at_once(
        mig_pool: dict[str, Any], settings: Any) -> None:
    settings.GPUPOOL_PREEMPT_GRACE_S = 0
    spot = _seven_spot(mig_pool)
    paying = orders.order(mig_pool, 7)
    drive(6)
    paying.refresh_from_db()
    assert paying.state == S.ACTIVE
    states = [x.state for x in _fresh(spot)]
    assert states.count(S.PREEMPTED) == 1 and states.count(S.ACTIVE) == 6


def test_a_spot_mig_order_preempts_nothing(mig_pool: dict[str, Any]) -> None:
    spot = _seven_spot(mig_pool)
    other = orders.order(mig_pool, 7, priority="spot")
    drive()
    other.refresh_from_db()
    assert other.state == S.QUEUED and other.wait_reason == "mig_full"
    assert [x.state for x in _fresh(spot)] == [S.ACTIVE] * 7


def test_a_spot_whole_gpu_lease_on_the_dynamic_gpu_gives_way(
        mig_pool: dict[str, Any], settings: Any) -> None:
    settings.GPUPOOL_PREEMPT_GRACE_S = 0
    whole = services.order_create(actor=mig_pool[0], tenant=mig_pool["t0"],
                                  spec=services.OrderSpec(models=["H100"], gpu_count=8,
                                                          priority="spot",
                                                          duration_hours=Decimal(2)))
    drive()
    whole.refresh_from_db()
    assert whole.state == S.ACTIVE
    mig = orders.order(mig_pool, 1)
    drive(6)
    mig.refresh_from_db()
    whole.refresh_from_db()
    assert whole.state == S.PREEMPTED
    assert mig.state == S.ACTIVE and mig_devices(mig)[0]["gpu_index"] == 0
    assert Gpu.objects.get(node=Node.objects.get(), index=0).mig_mode == "dynamic"
