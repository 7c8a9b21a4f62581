"""Finding 1, the staff corner: a staff user's key bound to a tenant acts for that tenant
only (no platform-wide staff powers through it); a staff key bound to no tenant is the
platform credential. A non-staff key bound to no tenant acts for nobody."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.tenants.models import ApiKey, Role
from portal.tenants.services import api_key_create, hash_secret
from tests.portal.factories import add_member, make_tenant, make_user

pytestmark = [pytest.mark.services("postgres"), pytest.mark.django_db]


def _bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def staff() -> Any:
    make_tenant("a"), make_tenant("b")
    return make_user("operator", staff=True)


def test_staff_key_bound_to_a_acts_for_a_only(staff: Any) -> None:
    key = _bearer(api_key_create(actor=staff, name="a-only",
                                 tenant=make_tenant("c")).secret)
    assert key.get("/api/v1/tenants/c").status_code == 200
    assert key.get("/api/v1/tenants/a").status_code == 404
    assert [t["slug"] for t in key.get("/api/v1/tenants").json()["results"]] == ["c"]
    assert key.get("/api/v1/nodes").status_code == 403
    assert key.post("/api/v1/tenants", {"name": "New"}, format="json").status_code == 403
    assert key.get("/api/v1/billing/usage", {"type": "csv", "tenant": "b"}).status_code == 404
    assert key.get("/api/v1/me").json()["is_staff"] is False


def test_unbound_staff_key_is_the_platform_credential(staff: Any) -> None:
    key = _bearer(api_key_create(actor=staff, name="ops", tenant=None).secret)
    assert key.get("/api/v1/nodes").status_code == 200
    assert {t["slug"] for t in key.get("/api/v1/tenants").json()["results"]} == {"a", "b"}
    assert key.get("/api/v1/tenants/b").status_code == 200


def test_unbound_key_of_a_tenant_user_acts_for_nobody(db: Any) -> None:
    """Such keys cannot be made any more (the service asks for a tenant); old rows may
    exist, and they must not fall back to every tenant of the user."""
    user = add_member(make_tenant("a"), "alice", Role.ADMIN)
    secret = "gpk_0123456789ab_" + "x" * 43
    ApiKey.objects.create(user=user, tenant=None, name="legacy", prefix="0123456789ab",
                          secret_hash=hash_secret(secret))
    key = _bearer(secret)
    assert key.get("/api/v1/tenants").json()["results"] == []
    assert key.get("/api/v1/tenants/a").status_code == 404
    assert key.get("/api/v1/leases").status_code == 404
