"""Database backstops and idempotency: races lose cleanly, never double-book."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from portal.core import clock
from portal.inventory.models import Gpu
from portal.leasing.models import Allocation, IdempotencyKey, Lease, LeaseState
from tests.portal.factories import client_for

BODY = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}


def _lease(pool: dict[str, Any], **kw: Any) -> Lease:
    now = clock.now()
    return Lease.objects.create(tenant=pool["a"], allowed_models=["H100"], start_at=now,
                                end_at=now + timedelta(hours=1), state=LeaseState.ACTIVE, **kw)


@pytest.mark.services("postgres")
def test_exclusion_constraint_refuses_overlapping_slot(pool: dict[str, Any]) -> None:
    gpu = Gpu.objects.first()
    assert gpu is not None
    one, two = _lease(pool), _lease(pool)
    now = clock.now()
    Allocation.objects.create(lease=one, gpu=gpu, node_id=gpu.node_id, slot=0, start_at=now,
                              end_at=now + timedelta(hours=1))
    with pytest.raises(IntegrityError, match="allocation_no_overlap"), transaction.atomic():
        Allocation.objects.create(lease=two, gpu=gpu, node_id=gpu.node_id, slot=0,
                                  start_at=now + timedelta(minutes=30),
                                  end_at=now + timedelta(hours=2))
    # back to back is fine; a released (not live) allocation does not block
    Allocation.objects.create(lease=two, gpu=gpu, node_id=gpu.node_id, slot=0,
                              start_at=now + timedelta(hours=1), end_at=now + timedelta(hours=2))
    Allocation.objects.filter(lease=one).update(live=False)
    Allocation.objects.create(lease=two, gpu=gpu, node_id=gpu.node_id, slot=1, start_at=now,
                              end_at=now + timedelta(minutes=5))


def test_same_key_same_body_replays_the_original(pool: dict[str, Any]) -> None:
    client = client_for(pool["alice"])
    first = client.post(reverse("order-create"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = client.post(reverse("order-create"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert Lease.objects.count() == 1


def test_same_key_different_body_is_422(pool: dict[str, Any]) -> None:
    client = client_for(pool["alice"])
    client.post(reverse("order-create"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    other = client.post(reverse("order-create"), {**BODY, "gpu_count": 2}, format="json",
                        HTTP_IDEMPOTENCY_KEY="k1")
    assert other.status_code == 422
    assert "Idempotency-Key" in other.json()["fields"]
    assert Lease.objects.count() == 1


def test_keys_are_scoped_per_tenant(pool: dict[str, Any]) -> None:
    client_for(pool["alice"]).post(reverse("order-create"), BODY, format="json",
                                   HTTP_IDEMPOTENCY_KEY="shared")
    response = client_for(pool["bob"]).post(reverse("order-create"), BODY, format="json",
                                            HTTP_IDEMPOTENCY_KEY="shared")
    assert response.status_code == 201
    assert Lease.objects.count() == 2


def test_rejected_order_stores_no_key(pool: dict[str, Any]) -> None:
    client = client_for(pool["alice"])
    bad = client.post(reverse("order-create"), {**BODY, "gpu_count": 99}, format="json",
                      HTTP_IDEMPOTENCY_KEY="k2")
    assert bad.status_code == 400 and "gpu_count" in bad.json()["fields"]
    assert not IdempotencyKey.objects.exists()


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_same_key_while_first_in_flight_is_409(pool_tx: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold the key's row uncommitted in another connection; the request must answer 409."""
    from portal.leasing import idempotency

    monkeypatch.setattr(idempotency, "LOCK_WAIT", "300ms")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            IdempotencyKey.objects.create(tenant=pool_tx["a"], key="busy",
                                          request_hash=idempotency.request_hash(BODY),
                                          response_status=0, response_body={})
            holding.set()
            release.wait(10)
            transaction.set_rollback(True)
        connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        response = client_for(pool_tx["alice"]).post(
            reverse("order-create"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="busy")
        assert response.status_code == 409, response.content
    finally:
        release.set()
        thread.join()
    assert not Lease.objects.exists()
