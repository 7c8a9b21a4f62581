from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from portal.billing.models import Price, TenantContract
from portal.billing.pricing import estimate, hours, line_cost
from tests.portal.factories import make_tenant

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.django_db
def test_estimate_uses_default_list_price_without_rows() -> None:
    """Without EUR rows, the USD default (2.50) converted at the EUR rate (0.92): never the
    USD number labelled EUR (issue 13, finding 7; ADR 0108)."""
    tenant = make_tenant("a", currency="EUR")
    amount, currency = estimate(tenant=tenant, gpu_model="H100", priority="on_demand",
                                gpus=Decimal(2), start=T0, end=T0.replace(hour=3))
    assert (amount, currency) == (Decimal("13.80"), "EUR")


@pytest.mark.django_db
def test_estimate_follows_effective_dates_model_rows_and_contracts() -> None:
    tenant = make_tenant("a")
    Price.objects.create(gpu_model="", priority="on_demand", unit_price=Decimal("3"),
                         effective_from=T0)
    Price.objects.create(gpu_model="H100", priority="on_demand", unit_price=Decimal("4"),
                         effective_from=T0.replace(hour=1))
    amount, _ = estimate(tenant=tenant, gpu_model="H100", priority="on_demand",
                         gpus=Decimal(1), start=T0, end=T0.replace(hour=2))
    assert amount == Decimal("7.00")
    TenantContract.objects.create(tenant=tenant, discount_percent=Decimal(50), effective_from=T0)
    amount, _ = estimate(tenant=tenant, gpu_model="H100", priority="on_demand",
                         gpus=Decimal("0.125"), start=T0, end=T0.replace(hour=2))
    assert amount == line_cost(gpus=Decimal("0.125"), seconds=3600, unit_price=Decimal("1.5")) \
        + line_cost(gpus=Decimal("0.125"), seconds=3600, unit_price=Decimal("2"))


def test_hours_split_at_boundaries() -> None:
    start, end = T0.replace(minute=30), T0.replace(hour=2, minute=15)
    spans = list(hours(start, end))
    assert [(b - a).total_seconds() for _, _, a, b in spans] == [1800, 3600, 900]


def test_line_cost_rounds_half_up_to_the_cent() -> None:
    assert line_cost(gpus=Decimal(1), seconds=18, unit_price=Decimal("1.0000")) == Decimal("0.01")
    assert line_cost(gpus=Decimal(1), seconds=17, unit_price=Decimal("1.0000")) == Decimal("0.00")
