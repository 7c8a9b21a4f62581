"""Finding 1 (issue 10): an API key is not held to its tenant.

The tester's setup: ``mallory`` is an admin of tenant A *and* of tenant B, and makes an
API key for A. With that key, and no other credential, they read B's leases, connection
details (GPU UUIDs, P_Key), events, members, usage CSV, invoices and audit log; minted a key
for B; added members to B and patched B. Each step is replayed here over HTTP with the key
alone; each must be refused as if B did not exist (404), change nothing, and leak none of
B's data — while the same user's browser session still reaches B (so the refusal comes from
the credential, not from the user's memberships).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.billing.models import Invoice
from portal.billing.services import invoice_refresh
from portal.core.services import audit_record
from portal.fleet.models import TenantPartition
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Gpu
from portal.leasing.models import Allocation, Lease, LeaseState
from portal.tenants.models import ApiKey, Invitation, Membership, Role, Tenant
from portal.tenants.services import api_key_create
from tests.portal.billing.builders import make_lease
from tests.portal.factories import add_member, make_tenant, make_user

pytestmark = [pytest.mark.services("postgres"), pytest.mark.django_db]
T0 = datetime(2026, 3, 30, 22, 0, tzinfo=UTC)
B_SECRETS = ("b-lease-secret", "b-audit-secret", "b-bystander", "GPU-b-uuid", "0x8123",
             "tenant-b-name")


@pytest.fixture
def attack(db: Any) -> dict[str, Any]:
    a, b = make_tenant("a"), make_tenant("b")
    Tenant.objects.filter(pk=b.pk).update(name="tenant-b-name")
    mallory = add_member(a, "mallory", Role.ADMIN)
    Membership.objects.create(tenant=b, user=mallory, role=Role.ADMIN)
    add_member(b, "b-bystander", Role.MEMBER)
    make_user("recruit")
    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=2))
    gpu = Gpu.objects.order_by("pk").first()
    assert gpu is not None
    Gpu.objects.filter(pk=gpu.pk).update(uuid="GPU-b-uuid")
    lease = make_lease(b, active_at=T0, end_at=T0 + timedelta(hours=2), name="b-lease-secret",
                       state=LeaseState.ACTIVE)
    Allocation.objects.create(lease=lease, gpu=gpu, node_id=gpu.node_id, slot=0,
                              start_at=T0, end_at=T0 + timedelta(hours=2))
    TenantPartition.objects.create(tenant=b, pkey=0x0123)
    audit_record(actor=mallory, action="test.b", tenant=b, changes={"x": "b-audit-secret"})
    from portal.billing.metering import meter_leases
    meter_leases(until=T0 + timedelta(days=1))
    invoice_refresh(tenant=b, month=date(2026, 3, 1))
    issued = api_key_create(actor=mallory, name="a-key", tenant=a)
    key_client = APIClient()
    key_client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    return {"a": a, "b": b, "mallory": mallory, "lease": lease, "key": key_client}


def _text(response: Any) -> str:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return body.decode()


def _refused(response: Any) -> None:
    text = _text(response)
    assert response.status_code == 404, (response.status_code, text[:300])
    for secret in B_SECRETS:
        assert secret not in text


def test_the_users_session_does_reach_b(attack: dict[str, Any]) -> None:
    """The control: without the key, mallory legitimately reads B."""
    client = APIClient()
    client.force_login(attack["mallory"])
    lease = attack["lease"].pk
    assert client.get(f"/api/v1/leases/{lease}/connection").json()["pkey"] == "0x8123"
    assert client.get("/api/v1/tenants/b/memberships").status_code == 200


@pytest.mark.parametrize("path", [
    "/api/v1/leases/{lease}",
    "/api/v1/leases/{lease}/connection",
    "/api/v1/leases/{lease}/events",
    "/api/v1/tenants/b",
    "/api/v1/tenants/b/memberships",
    "/api/v1/billing/usage?type=csv&tenant=b",
    "/api/v1/billing/usage?type=focus-csv&tenant=b",
    "/api/v1/billing/usage?type=focus-jsonl&tenant=b",
    "/api/v1/billing/invoices?tenant=b",
    "/api/v1/billing/budget?tenant=b",
    "/api/v1/billing/showback?tenant=b",
])
def test_key_for_a_reads_nothing_of_b(attack: dict[str, Any], path: str) -> None:
    _refused(attack["key"].get(path.format(lease=attack["lease"].pk)))


def test_key_for_a_cannot_pick_b_with_the_tenant_header(attack: dict[str, Any]) -> None:
    key: APIClient = attack["key"]
    for path in ("/api/v1/leases", "/api/v1/quotas", "/api/v1/billing/usage?type=csv"):
        _refused(key.get(path, HTTP_X_GPUPOOL_TENANT="b"))
    order = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}
    _refused(key.post("/api/v1/orders", order, format="json", HTTP_X_GPUPOOL_TENANT="b"))
    assert not Lease.objects.filter(tenant=attack["b"]).exclude(pk=attack["lease"].pk).exists()


def test_key_for_a_lists_only_a(attack: dict[str, Any]) -> None:
    key: APIClient = attack["key"]
    for path in ("/api/v1/leases", "/api/v1/tenants", "/api/v1/me", "/api/v1/audit-log",
                 "/api/v1/audit-log?tenant=b", "/api/v1/api-keys",
                 "/api/v1/billing/usage?type=csv", "/api/v1/billing/invoices"):
        response = key.get(path)
        text = _text(response)
        assert response.status_code == 200, (path, text[:300])
        for secret in B_SECRETS:
            assert secret not in text, (path, secret)
        assert '"b"' not in text and ",b," not in text, path
    assert key.get("/api/v1/me").json()["memberships"] == [
        {"tenant": "a", "name": "A", "role": "admin"}]


def test_key_for_a_cannot_mint_a_key_for_b(attack: dict[str, Any]) -> None:
    before = ApiKey.objects.count()
    _refused(attack["key"].post("/api/v1/api-keys", {"name": "pivot", "tenant": "b"},
                                format="json"))
    assert ApiKey.objects.count() == before


def test_key_for_a_cannot_add_members_to_b(attack: dict[str, Any]) -> None:
    """New members come by invitation (ADR 0102): a key for a can neither invite into b nor
    list b's invitations."""
    _refused(attack["key"].post("/api/v1/tenants/b/invitations",
                                {"email": "recruit@example.com", "role": "admin"}, format="json"))
    _refused(attack["key"].get("/api/v1/tenants/b/invitations"))
    assert not Invitation.objects.filter(tenant=attack["b"]).exists()
    assert not Membership.objects.filter(tenant=attack["b"], user__username="recruit").exists()


def test_key_for_a_cannot_change_or_remove_bs_members(attack: dict[str, Any]) -> None:
    member = Membership.objects.get(tenant=attack["b"], user__username="b-bystander")
    path = f"/api/v1/tenants/b/memberships/{member.pk}"
    _refused(attack["key"].patch(path, {"role": "viewer"}, format="json"))
    _refused(attack["key"].delete(path))
    member.refresh_from_db()
    assert member.role == Role.MEMBER


def test_key_for_a_cannot_patch_b(attack: dict[str, Any]) -> None:
    _refused(attack["key"].patch("/api/v1/tenants/b", {"name": "pwned"}, format="json"))
    assert Tenant.objects.get(slug="b").name == "tenant-b-name"


def test_key_for_a_cannot_act_on_bs_lease(attack: dict[str, Any]) -> None:
    lease = attack["lease"]
    for verb, body in (("release", {}), ("cancel", {}),
                       ("extend", {"end_at": "2099-01-01T00:00:00Z"})):
        _refused(attack["key"].post(f"/api/v1/leases/{lease.pk}/{verb}", body, format="json"))
    lease.refresh_from_db()
    assert lease.state == LeaseState.ACTIVE and lease.end_at == T0 + timedelta(hours=2)


def test_key_for_a_still_works_for_a(attack: dict[str, Any]) -> None:
    key: APIClient = attack["key"]
    assert key.get("/api/v1/tenants/a").status_code == 200
    assert key.get("/api/v1/tenants/a/memberships").status_code == 200
    assert key.get("/api/v1/leases", HTTP_X_GPUPOOL_TENANT="a").status_code == 200
    assert key.patch("/api/v1/tenants/a", {"name": "A2"}, format="json").status_code == 200
    minted = key.post("/api/v1/api-keys", {"name": "ci", "tenant": "a"}, format="json")
    assert minted.status_code == 201 and minted.json()["tenant"] == "a"


def test_key_is_not_a_page_credential(attack: dict[str, Any]) -> None:
    """Pages and page downloads take a browser session only: a key there is no one."""
    bearer = {"HTTP_AUTHORIZATION": attack["key"]._credentials["HTTP_AUTHORIZATION"]}
    page = Client()
    for path in ("/leases/", f"/leases/{attack['lease'].pk}/",
                 "/billing/export/?type=csv&tenant=b"):
        response = page.get(path, **bearer)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_invoice_exists_for_b(attack: dict[str, Any]) -> None:
    """The fixture's B invoice is real, so the invoice refusal above is meaningful."""
    assert Invoice.objects.filter(tenant=attack["b"]).exists()
