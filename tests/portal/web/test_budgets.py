"""Finding 1 (issue 13): per-model GPU-hour budgets, metered apart from committed."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from portal.core import clock
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.leasing import services
from portal.leasing.models import Quota
from portal.leasing.quotas import gpu_hours_used, month_bounds
from portal.leasing.selectors import quota_usage
from tests.portal.web.conftest import active_lease, order


@pytest.fixture
def two_models(pool: dict[str, Any]) -> dict[str, Any]:
    """Add 1 A100 node; tenant a: A100 budget 1 GPU-hour, H100 budget 1000."""
    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=8, model="A100",
                                                  prefix="a100", spines=1))
    Quota.objects.create(tenant=pool["a"], gpu_model="A100", max_gpus=8, gpu_hour_budget=1,
                         max_lease_hours=48)
    return pool


def test_budget_per_model_is_not_charged_with_other_models_hours(
        two_models: dict[str, Any]) -> None:
    """Old code: the A100 budget (1) was checked against the H100 hours (16) → refused."""
    active_lease(two_models)  # 8 × H100 for 2 h: 16 H100 GPU-hours
    lease = order(two_models, models=["A100"], gpu_count=1, duration_hours=Decimal("0.5"))
    assert lease.allowed_models == ["A100"]
    rows = {r["gpu_model"]: r for r in quota_usage(tenant=two_models["a"])}
    assert rows["A100"]["gpu_hours_this_month"] == Decimal("0.50")
    assert rows["H100"]["gpu_hours_this_month"] == Decimal("16.00")


def test_budget_per_model_refusal_states_the_model_limit_and_what_is_left(
        two_models: dict[str, Any]) -> None:
    with pytest.raises(services.BudgetExceeded) as err:
        order(two_models, models=["A100"], gpu_count=1, duration_hours=Decimal(2))
    assert err.value.message == ("This would exceed the monthly budget for A100: 1.0 "
                                 "GPU-hours, 1.0 left; this order needs 2.0.")
    assert list(err.value.fields) == ["duration_hours"]


def test_used_this_month_counts_metered_apart_from_committed(
        two_models: dict[str, Any], frozen_clock: Any) -> None:
    """Old code counted a lease's whole planned window as used (16 shown, 0 metered)."""
    lease = active_lease(two_models)
    clock.freeze(lease.active_at + timedelta(minutes=30))
    start, end = month_bounds(clock.now())
    used = gpu_hours_used(two_models["a"], "H100", start, end, clock.now())
    assert used.metered == Decimal(4)  # 8 GPUs × 0.5 h run so far
    assert used.committed == Decimal(8 * 2) - Decimal(4)
    row = {r["gpu_model"]: r for r in quota_usage(tenant=two_models["a"])}["H100"]
    assert (row["gpu_hours_metered"], row["gpu_hours_committed"]) == (Decimal("4.00"),
                                                                      Decimal("12.00"))


def test_used_this_month_a_waiting_order_is_committed_never_metered(
        two_models: dict[str, Any]) -> None:
    start = clock.now() + timedelta(days=1)
    order(two_models, start_at=start, duration_hours=Decimal(3))
    month_start, month_end = month_bounds(clock.now())
    used = gpu_hours_used(two_models["a"], "H100", month_start, month_end, clock.now())
    assert (used.metered, used.committed) == (Decimal(0), Decimal(24))
    a100 = gpu_hours_used(two_models["a"], "A100", month_start, month_end, clock.now())
    assert a100.total == 0


def test_dashboard_shows_metered_and_committed_hours_apart(two_models: dict[str, Any],
                                                         alice: Client) -> None:
    active_lease(two_models)
    body = alice.get("/").content.decode()
    assert "metered 0.0" in body and "committed 16.0" in body


def test_budget_per_model_an_order_for_either_model_fits_on_the_one_with_room(
        two_models: dict[str, Any]) -> None:
    """A100's budget (1 GPU-hour) cannot take 2 GPU-hours, H100's can: the order fits."""
    lease = order(two_models, models=["A100", "H100"], gpu_count=1, duration_hours=Decimal(2))
    assert lease.state == "queued"


def test_budget_per_model_duration_limit_of_every_acceptable_model_still_applies(
        two_models: dict[str, Any]) -> None:
    Quota.objects.filter(tenant=two_models["a"], gpu_model="A100").update(max_lease_hours=4)
    with pytest.raises(services.OrderRejected) as err:
        order(two_models, models=["A100", "H100"], gpu_count=1, duration_hours=Decimal(8))
    assert err.value.fields == {"duration_hours": ["At most 4 hours per lease."]}
