"""Orders the pool can never hold are refused at the door with words (issue 11.3).

The pool (tests/portal/driving.py): 4 H100 nodes × 8 = 32 H100 under 2 leaves of 2.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse

from portal.leasing import quoting, services
from portal.leasing.feasibility import NeverPlaceable
from portal.leasing.models import Lease
from tests.portal.factories import client_for

pytestmark = pytest.mark.services


def spec(**kw: Any) -> services.OrderSpec:
    return services.OrderSpec(**{"models": ["H100"], "gpu_count": 8,
                                 "duration_hours": Decimal(2), **kw})


def test_never_fitting_order_is_refused(pool: dict[str, Any]) -> None:
    # 3 nodes under one leaf, on leaves of 2: it used to be accepted and queued forever
    bad = spec(nodes=3, locality="leaf", locality_required=True)
    with pytest.raises(NeverPlaceable) as info:
        services.order_create(actor=pool["alice"], tenant=pool["a"], spec=bad)
    assert info.value.status_code == 400
    assert info.value.fields == {"nodes": [
        "No leaf switch holds 3 H100 nodes (at most 2); order fewer nodes or drop the "
        "required locality."]}
    assert not Lease.objects.exists()


def test_more_gpus_than_the_pool_says_so_not_quota(pool: dict[str, Any]) -> None:
    with pytest.raises(NeverPlaceable) as info:
        services.order_create(actor=pool["bob"], tenant=pool["b"], spec=spec(nodes=5))
    assert info.value.message == "The pool holds 32 H100 GPUs; this order asks for 40."
    assert list(info.value.fields) == ["gpu_count"]


def test_quote_refuses_a_never_fitting_order(pool: dict[str, Any]) -> None:
    with pytest.raises(NeverPlaceable):
        quoting.order_quote(actor=pool["alice"], tenant=pool["a"],
                            spec=spec(nodes=3, locality="leaf", locality_required=True))


def test_api_answers_400_naming_the_field(pool: dict[str, Any]) -> None:
    body = {"models": ["H100"], "gpu_count": 8, "nodes": 3, "locality": "leaf",
            "locality_required": True, "duration_hours": 2}
    for name in ("order-create", "order-quote"):
        response = client_for(pool["alice"]).post(reverse(name), body, format="json")
        assert response.status_code == 400, (name, response.content)
        assert response.json()["error"] == "never_placeable"
        assert list(response.json()["fields"]) == ["nodes"]
    assert not Lease.objects.exists()


def test_a_placeable_gang_is_still_accepted(pool: dict[str, Any]) -> None:
    lease = services.order_create(actor=pool["alice"], tenant=pool["a"],
                                  spec=spec(nodes=2, locality="leaf", locality_required=True))
    assert lease.pk is not None
