"""Findings 3 and 6 (issue 13): one source of order limits; far dates are a 4xx, never a 500.

Old code: a start of 9999-12-31 raised ``OverflowError`` in ``_window`` (HTTP 500) on the
order page, its preview, ``POST /orders`` and ``/orders/quote``; the year 3000 was accepted;
the form, the API and the service disagreed (8/16 GPUs per node, 64/512 nodes, 2,160 h/a
year).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core import clock
from portal.leasing import limits
from portal.leasing.api.serializers import OrderSerializer
from portal.leasing.models import Lease
from portal.web.forms import OrderForm
from tests.portal.factories import client_for as api_client
from tests.portal.web.conftest import order_form

FAR = ["9999-12-31T00:00", "3000-01-01T00:00"]


def _api(pool: dict[str, Any], route: str, start: str, **body: Any) -> Any:
    data = {"models": ["H100"], "gpu_count": 8, "duration_hours": 2, "start_at": start, **body}
    return api_client(pool["alice"]).post(reverse(route), data, format="json")


@pytest.mark.parametrize("start", FAR)
@pytest.mark.parametrize("route", ["order-create", "order-quote"])
def test_far_start_date_is_a_4xx_naming_start_at_in_the_api(pool: dict[str, Any], route: str,
                                                            start: str) -> None:
    response = _api(pool, route, start + "Z")
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == ["start_at"]
    assert "at most 90 days ahead" in response.json()["fields"]["start_at"][0]
    assert not Lease.objects.exists()


@pytest.mark.parametrize("start", FAR)
@pytest.mark.parametrize("view", ["web:order", "web:order_preview"])
def test_far_start_date_is_a_4xx_naming_start_at_on_the_page(alice: Client, view: str,
                                                             start: str) -> None:
    for extra in ({}, {"preview": "1"}):
        response = alice.post(reverse(view), order_form(start="later", start_at=start, **extra))
        assert response.status_code == 400
        assert "at most 90 days ahead" in response.content.decode()
    assert not Lease.objects.exists()


def test_far_end_date_is_a_4xx_naming_end_at(pool: dict[str, Any]) -> None:
    response = api_client(pool["alice"]).post(reverse("order-create"), {
        "models": ["H100"], "gpu_count": 8, "end_at": "9999-12-31T23:59:59Z"}, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["end_at"]


def test_booking_horizon_is_a_setting(pool: dict[str, Any], settings: Any) -> None:
    start = (clock.now() + timedelta(days=10)).strftime("%Y-%m-%dT%H:%MZ")
    assert _api(pool, "order-quote", start).status_code == 200
    settings.ORDER_BOOKING_HORIZON_DAYS = 7
    response = _api(pool, "order-quote", start)
    assert response.status_code == 400
    assert "at most 7 days ahead" in response.json()["fields"]["start_at"][0]


def test_limits_one_source_for_form_serializer_and_service() -> None:
    form = OrderForm(model_choices=["H100"])
    api = OrderSerializer().fields
    # the field's bound is a MIG order's (instances); whole GPUs are held to
    # MAX_GPUS_PER_NODE by the service and the form's clean (ADR 0222)
    assert form.fields["gpu_count"].max_value == api["gpu_count"].max_value \
        == limits.MAX_MIG_INSTANCES_PER_NODE
    assert form.fields["nodes"].max_value == api["nodes"].max_value == limits.MAX_NODES
    assert form.fields["duration_hours"].max_value == api["duration_hours"].max_value \
        == limits.MAX_DURATION_HOURS


def test_limits_duration_over_the_maximum_is_refused_everywhere(pool: dict[str, Any],
                                                                alice: Client) -> None:
    hours = limits.MAX_DURATION_HOURS + 1
    response = api_client(pool["alice"]).post(reverse("order-quote"), {
        "models": ["H100"], "gpu_count": 8, "duration_hours": hours}, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["duration_hours"]
    page = alice.post(reverse("web:order"), order_form(duration_hours=str(hours)))
    assert page.status_code == 400
