"""Finding 7 (issue 13): money a newcomer can follow.

Old code: a quote to start now was a cent low (39.99 for 2 GPUs × 8 h at 2.50: each hour's
seconds were truncated, so a start with microseconds lost a second); the unit price was
never shown; extending showed no cost and no maximum; an ended lease showed no cost; a CNY
tenant without CNY price rows paid the USD default numbers labelled CNY.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.billing.metering import meter_leases
from portal.billing.models import Price, UsageRecord
from portal.billing.pricing import PriceUnavailable, estimate, unit_price
from portal.core import clock
from portal.leasing import quoting, services
from portal.tenants.models import Tenant
from tests.portal.factories import client_for as api_client
from tests.portal.factories import make_tenant
from tests.portal.web.conftest import active_lease, drive, order, order_form

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_money_quote_exact_to_the_cent_for_any_start() -> None:
    tenant = make_tenant("q")
    for seconds in range(0, 3600, 37):
        for micros in (0, 1, 300_000, 999_999):
            start = T0 + timedelta(seconds=seconds, microseconds=micros)
            amount, _ = estimate(tenant=tenant, gpu_model="H100", priority="on_demand",
                                 gpus=Decimal(2), start=start, end=start + timedelta(hours=8))
            assert amount == Decimal("40.00"), (seconds, micros)


def test_money_quote_to_start_now_is_not_a_cent_low(pool: dict[str, Any],
                                                    frozen_clock: datetime) -> None:
    clock.freeze(frozen_clock + timedelta(minutes=2, seconds=13, microseconds=300_000))
    spec = services.OrderSpec(models=["H100"], gpu_count=2, duration_hours=Decimal(8))
    quote = quoting.order_quote(actor=pool["alice"], tenant=pool["a"], spec=spec)
    assert (quote.price, quote.unit_price, quote.currency) == (Decimal("40.00"),
                                                               Decimal("2.5000"), "USD")


def test_money_quote_shows_the_unit_price(pool: dict[str, Any], alice: Client) -> None:
    body = api_client(pool["alice"]).post(reverse("order-quote"), {
        "models": ["H100"], "gpu_count": 8, "duration_hours": 2}, format="json").json()
    assert (body["price"], body["unit_price"]) == ("40.00", "2.5000")
    page = alice.post(reverse("web:order_preview"), order_form()).content.decode()
    assert "8 GPUs × 2 h × 2.5000 USD per GPU-hour" in page


def test_money_cny_tenant_is_never_charged_usd_numbers(pool: dict[str, Any]) -> None:
    Tenant.objects.filter(pk=pool["a"].pk).update(currency="CNY")
    pool["a"].refresh_from_db()
    rate = unit_price(tenant=pool["a"], gpu_model="H100", priority="on_demand", at=T0)
    assert (rate.unit_price, rate.currency) == (Decimal("18.0000"), "CNY")  # 2.50 USD × 7.2
    lease = active_lease(pool, gpu_count=1, duration_hours=Decimal(1))
    meter_leases(until=lease.active_at + timedelta(minutes=30))
    line = UsageRecord.objects.get(lease=lease)
    assert (line.currency, line.unit_price, line.cost) == ("CNY", Decimal("18.0000"),
                                                          Decimal("9.00"))


def test_money_own_currency_price_rows_win(pool: dict[str, Any]) -> None:
    Tenant.objects.filter(pk=pool["a"].pk).update(currency="CNY")
    pool["a"].refresh_from_db()
    Price.objects.create(gpu_model="H100", priority="on_demand", currency="CNY",
                         unit_price=Decimal("16.5000"), effective_from=T0 - timedelta(days=1))
    rate = unit_price(tenant=pool["a"], gpu_model="H100", priority="on_demand", at=T0)
    assert rate.unit_price == Decimal("16.5000")


def test_money_currency_without_prices_or_rate_is_refused(pool: dict[str, Any],
                                                          settings: Any) -> None:
    settings.BILLING_FX_RATES = {"CNY": "7.2"}
    Tenant.objects.filter(pk=pool["a"].pk).update(currency="JPY")
    with pytest.raises(PriceUnavailable) as err:
        unit_price(tenant=Tenant.objects.get(pk=pool["a"].pk), gpu_model="H100",
                   priority="on_demand", at=T0)
    assert list(err.value.fields) == ["currency"]
    response = api_client(pool["alice"]).post(reverse("order-quote"), {
        "models": ["H100"], "gpu_count": 8, "duration_hours": 2}, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == ["currency"]


def test_money_lease_page_shows_unit_price_and_the_cost_of_an_ended_lease(
        pool: dict[str, Any], alice: Client) -> None:
    lease = active_lease(pool, duration_hours=Decimal(1))
    url = reverse("web:lease", kwargs={"lease_id": lease.pk})
    body = alice.get(url).content.decode()
    assert "2.5000 USD" in body and "Estimated cost" in body and "20.00 USD" in body
    clock.freeze(lease.end_at + timedelta(minutes=5))
    drive()
    meter_leases(until=clock.now())
    lease.refresh_from_db()
    assert lease.ended_at is not None
    body = alice.get(url).content.decode()
    billed = sum(r.cost for r in UsageRecord.objects.filter(lease=lease))
    assert f">{billed:.2f} USD" in body and ">Cost<" in body


def test_money_extend_shows_the_added_cost_and_the_maximum(pool: dict[str, Any],
                                                           alice: Client) -> None:
    lease = active_lease(pool)
    url = reverse("web:lease_extend", kwargs={"lease_id": lease.pk})
    body = alice.get(url).content.decode()
    assert "Each extra hour costs 20.00 USD (8 GPUs × 2.5000 USD per GPU-hour)." in body
    assert "A lease lasts at most 48 hours" in body  # the tenant's quota, under the limit
    new_end = (lease.end_at + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    page = alice.post(url, {"end_at": new_end}, follow=True).content.decode()
    assert "Lease extended. 40.00 USD added." in page


def test_money_waiting_order_costs_nothing_once_cancelled(pool: dict[str, Any],
                                                          alice: Client) -> None:
    lease = order(pool, start_at=clock.now() + timedelta(days=2))
    services.lease_cancel(actor=pool["alice"], lease=lease)
    body = alice.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    assert 'data-testid="lease-cost"' not in body
