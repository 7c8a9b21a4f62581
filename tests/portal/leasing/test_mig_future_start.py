"""Issue 28: a MIG order with a future start is reserved (SCHEDULED, its instance's slices
held from its start) and starts at its time — it was placed and granted at once, its
start ignored (regression)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from portal.core import clock
from portal.leasing.models import LeaseState as S
from portal.leasing.models import MigInstance
from tests.portal.leasing import test_mig_orders as orders
from tests.portal.leasing.conftest import drive

mig_pool = orders.mig_pool  # the fixture: one H100 node, GPU 0 offered for MIG


def test_a_future_mig_order_is_reserved_and_starts_at_its_time(
        mig_pool: dict[str, Any], frozen_clock: Any) -> None:
    start = frozen_clock + timedelta(hours=3)
    lease = orders.order(mig_pool, 0, start_at=start)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.SCHEDULED
    assert lease.start_at == start and lease.end_at == start + timedelta(hours=2)
    (instance,) = MigInstance.objects.filter(lease=lease, allocation__live=True)
    assert instance.allocation.start_at == start and instance.uuid == ""  # not made yet
    clock.freeze(start - timedelta(minutes=1))
    drive()
    lease.refresh_from_db()
    assert lease.state == S.SCHEDULED
    clock.freeze(start)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE
    instance.refresh_from_db()
    assert instance.uuid.startswith("MIG-")


def test_a_now_order_does_not_take_a_reserved_instances_slices(
        mig_pool: dict[str, Any], frozen_clock: Any) -> None:
    later = orders.order(mig_pool, 0, profile="7g.80gb",
                         start_at=frozen_clock + timedelta(hours=3))
    drive()
    now = orders.order(mig_pool, 1)
    drive()
    later.refresh_from_db()
    now.refresh_from_db()
    assert later.state == S.SCHEDULED
    assert now.state == S.QUEUED and now.wait_reason == "mig_full"
