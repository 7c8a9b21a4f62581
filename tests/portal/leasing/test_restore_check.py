"""Issue 31: ``manage.py restore_check`` — the invariants of a restored database, each able
to fail (a violation planted behind the services' back is found and named)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from portal.billing.metering import meter_leases
from portal.billing.models import UsageRecord
from portal.core import clock
from portal.fleet.models import NodeObservedState
from portal.inventory.models import Gpu, Service
from portal.leasing import services
from portal.leasing.models import Allocation, Lease
from tests.portal.leasing.conftest import drive

pytestmark = pytest.mark.services("postgres")


def _run() -> tuple[bool, str]:
    out = StringIO()
    try:
        call_command("restore_check", stdout=out)
    except CommandError:
        return False, out.getvalue()
    return True, out.getvalue()


def _active(pool: dict[str, Any]) -> Lease:
    lease = services.order_create(actor=pool["alice"], tenant=pool["a"], spec=services.OrderSpec(
        models=["H100"], gpu_count=8, duration_hours=Decimal(4)))
    drive()
    lease.refresh_from_db()
    return lease


def test_a_consistent_database_passes(pool: dict[str, Any]) -> None:
    _active(pool)
    ok, out = _run()
    assert ok, out
    assert out.count("ok ") == 5


@pytest.mark.parametrize("plant", ["running_on_failed_hardware", "state_without_event",
                                   "usage_gap", "orphan_grants"])
def test_each_check_finds_what_was_planted(pool: dict[str, Any], plant: str) -> None:
    lease = _active(pool)
    alloc = Allocation.objects.filter(lease=lease, live=True).first()
    if plant == "running_on_failed_hardware":
        Gpu.objects.filter(pk=alloc.gpu_id).update(service=Service.OUT_OF_SERVICE)
    elif plant == "state_without_event":
        Lease.objects.filter(pk=lease.pk).update(state="ended")
    elif plant == "usage_gap":
        clock.advance(timedelta(hours=3, minutes=10))
        meter_leases(until=clock.now())
        UsageRecord.objects.filter(lease=lease).order_by("period_start")[1].delete()
    else:
        NodeObservedState.objects.filter(node_id=alloc.node_id).update(document={
            "generation_applied": 1, "access_grants": [
                {"lease_id": "ls_ffffffffffffffff", "account": "lease-ffff", "state": "present"}]})
    ok, out = _run()
    assert not ok and f"FAIL {plant}" in out, out
