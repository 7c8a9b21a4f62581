"""Issue 12: REQUESTED and REJECTED are reachable and visible (ADR 0132).

An order the policy refuses at submission (quota, budget, pending orders, spot, a member's
limit) is still answered 4xx naming the field, and is kept as a REJECTED lease with its
reason, listed by the API and the pages. Bad input is not an order: nothing is written.
Every lease's history starts in REQUESTED.
"""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.urls import reverse

from portal.leasing.models import Lease, LeaseEvent
from portal.leasing.models import LeaseState as S
from tests.portal.factories import client_for

OVER_QUOTA = {"models": ["H100"], "gpu_count": 8, "nodes": 2, "duration_hours": 2}


def _post(user: Any, body: dict[str, Any], **headers: Any) -> Any:
    return client_for(user).post(reverse("order-create"), body, format="json", **headers)


def test_a_refused_order_is_a_rejected_lease_with_its_reason(pool: dict[str, Any]) -> None:
    refused = _post(pool["bob"], OVER_QUOTA)
    assert refused.status_code == 400 and refused.json()["error"] == "order_rejected"
    assert list(refused.json()["fields"]) == ["gpu_count"]
    listed = client_for(pool["bob"]).get("/api/v1/leases", {"state": "rejected"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert len(rows) == 1
    assert rows[0]["state"] == "rejected"
    assert rows[0]["state_reason"] == refused.json()["detail"]
    lease = Lease.objects.get(pk=rows[0]["id"])
    assert lease.tenant == pool["b"] and lease.created_by == pool["bob"]
    event = LeaseEvent.objects.get(lease=lease)
    assert (event.from_state, event.to_state) == (S.REQUESTED, S.REJECTED)
    assert event.data["error"] == "order_rejected" and "gpu_count" in event.data["fields"]


def test_a_rejected_lease_holds_nothing_and_blocks_nothing(pool: dict[str, Any]) -> None:
    from portal.billing.statements import lease_money
    from portal.leasing.quotas import pending_orders

    assert _post(pool["bob"], OVER_QUOTA).status_code == 400
    lease = Lease.objects.get(state=S.REJECTED)
    assert pending_orders(pool["b"]) == 0 and not lease.allocations.exists()
    assert lease_money(lease) is None
    ok = _post(pool["bob"], {**OVER_QUOTA, "nodes": 1})
    assert ok.status_code == 201, ok.content


def test_bad_input_is_not_an_order_and_writes_nothing(pool: dict[str, Any]) -> None:
    for body in ({**OVER_QUOTA, "gpu_count": 0}, {**OVER_QUOTA, "models": ["Z9000"]},
                 {**OVER_QUOTA, "duration_hours": -1}):
        assert _post(pool["bob"], body).status_code == 400
    assert not Lease.objects.exists()


def test_idempotent_refusal_is_recorded_and_the_key_stays_free(pool: dict[str, Any]) -> None:
    refused = _post(pool["bob"], OVER_QUOTA, HTTP_IDEMPOTENCY_KEY="k1")
    assert refused.status_code == 400
    assert Lease.objects.filter(state=S.REJECTED).count() == 1
    ok = _post(pool["bob"], {**OVER_QUOTA, "nodes": 1}, HTTP_IDEMPOTENCY_KEY="k1")
    assert ok.status_code == 201, ok.content  # a corrected retry with the same key


def test_the_pages_show_the_rejected_order_and_why(pool: dict[str, Any]) -> None:
    refused = _post(pool["bob"], OVER_QUOTA)
    lease = Lease.objects.get(state=S.REJECTED)
    page = Client()
    page.force_login(pool["bob"])
    listing = page.get(reverse("web:leases")).content.decode()
    assert 'data-state="rejected"' in listing and "Rejected" in listing
    detail = page.get(reverse("web:lease", kwargs={"lease_id": lease.pk})).content.decode()
    assert refused.json()["detail"] in detail


def test_every_history_starts_in_requested(pool: dict[str, Any]) -> None:
    ok = _post(pool["alice"], {**OVER_QUOTA, "nodes": 1})
    first = LeaseEvent.objects.filter(lease_id=ok.json()["id"]).order_by("created", "id")[0]
    assert (first.from_state, first.to_state) == (S.REQUESTED, S.QUEUED)


def test_the_refusal_names_the_rejected_lease(pool: dict[str, Any]) -> None:
    """Regression: the 4xx body of a refused order did not say which REJECTED lease kept
    it, so a client could not link its refusal to the record (``GET /leases/{id}``)."""
    refused = _post(pool["bob"], OVER_QUOTA).json()
    lease = Lease.objects.get(pk=refused["lease_id"])
    assert lease.state == S.REJECTED and lease.state_reason == refused["detail"]
    shown = client_for(pool["bob"]).get(f"/api/v1/leases/{refused['lease_id']}")
    assert shown.status_code == 200 and shown.json()["state"] == "rejected"
    other = client_for(pool["alice"]).get(f"/api/v1/leases/{refused['lease_id']}")
    assert other.status_code == 404  # another tenant's record stays invisible
