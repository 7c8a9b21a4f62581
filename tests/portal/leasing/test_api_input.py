"""Bad input on the order and lease endpoints: 400 naming the field, never a 500."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse

from portal.core import clock
from portal.leasing.models import Lease, LeaseState
from tests.portal.factories import client_for

GOOD = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}
GARBAGE: list[Any] = [None, "", "x" * 300, -5, 10**12, 3.7, [], {"a": 1}, True, "2020-13-45"]
FIELDS = ["models", "gpu_count", "gpu_milli", "mig_profile", "nodes", "locality",
          "locality_required", "priority", "start_at", "duration_hours", "end_at", "name",
          "tags"]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", GARBAGE, ids=repr)
@pytest.mark.parametrize("route", ["order-create", "order-quote"])
def test_garbage_order_fields(pool: dict[str, Any], route: str, field: str, value: Any) -> None:
    response = client_for(pool["alice"]).post(reverse(route), {**GOOD, field: value},
                                              format="json")
    assert response.status_code < 500, response.content
    if response.status_code == 400:
        assert response.json()["fields"], response.content
    if route == "order-create" and response.status_code != 201:
        assert not Lease.objects.exists()


@pytest.mark.parametrize("body", [{}, {"end_at": "soon"}, {"end_at": None}, {"end_at": 5},
                                  {"end_at": "2000-01-01T00:00:00Z"}])
def test_garbage_extension(pool: dict[str, Any], body: dict[str, Any]) -> None:
    now = clock.now()
    lease = Lease.objects.create(tenant=pool["a"], allowed_models=["H100"], gpu_model="H100",
                                 start_at=now, end_at=now + timedelta(hours=1), active_at=now,
                                 state=LeaseState.ACTIVE)
    response = client_for(pool["alice"]).post(reverse("lease-extend", kwargs={"pk": lease.pk}),
                                              body, format="json")
    assert response.status_code == 400 and "end_at" in response.json()["fields"]
    lease.refresh_from_db()
    assert lease.end_at == now + timedelta(hours=1)


@pytest.mark.parametrize("pk", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_unknown_lease_ids_are_404(pool: dict[str, Any], pk: str) -> None:
    response = client_for(pool["alice"]).get(reverse("lease-detail", kwargs={"pk": pk}))
    assert response.status_code == 404
