"""Pages issue a bounded number of SQL queries, however many leases a tenant has."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core import clock
from portal.fleet.models import GpuTelemetry, PortTelemetry
from portal.inventory.models import Node
from portal.leasing.models import Allocation, Lease
from tests.portal.web.conftest import drive, order

DASHBOARD_MAX = 18
LEASES_MAX = 11
LEASE_MAX = 23  # +3 (issue 13): the lease's price book (2) and its metered cost (1)


@pytest.fixture
def busy(pool: dict[str, Any]) -> dict[str, Any]:
    """Two active 8-GPU leases with telemetry, 30 past and 6 future leases, many events."""
    first = order(pool, name="run-1")
    second = order(pool, name="run-2")
    drive()
    for node in Node.objects.all():
        for i in range(8):
            GpuTelemetry.objects.create(node=node, index=i, ts=clock.now(),
                                        data={"gpu_util_pct": 50, "temperature_c": 60})
        PortTelemetry.objects.create(node=node, device="mlx5_0", port=1, ts=clock.now(),
                                     state_id=4, data={"rates_per_s": {"port_xmit_bytes": 1e9}})
    past = [Lease(tenant=pool["a"], created_by=pool["alice"], name=f"old-{i}",
                  allowed_models=["H100"], gpu_model="H100", gpu_count=2, state="ended",
                  start_at=clock.now() - timedelta(days=i + 2),
                  end_at=clock.now() - timedelta(days=i + 1)) for i in range(30)]
    Lease.objects.bulk_create(past)
    for i in range(6):
        order(pool, name=f"later-{i}", gpu_count=1,
              start_at=clock.now() + timedelta(days=1, hours=i))
    for lease in (first, second):
        lease.refresh_from_db()
        assert lease.state == "active"
    return {"lease": first, **pool}


def test_dashboard_query_count(busy: dict[str, Any], alice: Client,
                               django_assert_max_num_queries: Any) -> None:
    with django_assert_max_num_queries(DASHBOARD_MAX):
        assert alice.get(reverse("web:dashboard")).status_code == 200


def test_leases_list_query_count(busy: dict[str, Any], alice: Client,
                                 django_assert_max_num_queries: Any) -> None:
    with django_assert_max_num_queries(LEASES_MAX):
        response = alice.get(reverse("web:leases"))
    assert response.status_code == 200 and "old-1" in response.content.decode()
    with django_assert_max_num_queries(LEASES_MAX):
        assert alice.get(reverse("web:calendar")).status_code == 200


def test_lease_page_query_count(busy: dict[str, Any], alice: Client,
                                django_assert_max_num_queries: Any) -> None:
    lease = busy["lease"]
    assert Allocation.objects.filter(lease=lease, live=True).count() == 64
    with django_assert_max_num_queries(LEASE_MAX):
        response = alice.get(reverse("web:lease", kwargs={"lease_id": lease.pk}))
    assert response.status_code == 200
    assert "Live telemetry" in response.content.decode()
