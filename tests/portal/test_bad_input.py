"""Bad input on every write endpoint: 400 with the offending field named; nothing written."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from portal.core.models import AuditLog
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.tenants.models import ApiKey, Invitation, Membership, Role, Tenant
from tests.portal.factories import add_member, client_for, make_tenant, make_user

GARBAGE: list[Any] = [None, 12, "x" * 300, [], {"nested": True}, -1, "2020-01-01"]

# (url name, kwargs, method, body, field that must be named)
CASES = [
    ("tenant-list", {}, "post", {}, "name"),
    ("tenant-list", {}, "post", {"name": "x", "slug": "not a slug!"}, "slug"),
    ("tenant-list", {}, "post", {"name": "x", "contact_email": "nope"}, "contact_email"),
    ("tenant-list", {}, "post", {"name": "x", "currency": "dollars"}, "currency"),
    ("tenant-list", {}, "post", {"name": "Taken", "slug": "a"}, "slug"),
    ("tenant-detail", {"slug": "a"}, "patch", {"name": "x" * 500}, "name"),
    ("tenant-detail", {"slug": "a"}, "patch", {"contact_email": 5}, "contact_email"),
    ("invitation-list", {"tenant_slug": "a"}, "post", {}, "email"),
    ("invitation-list", {"tenant_slug": "a"}, "post", {"email": "ghost"}, "email"),
    ("invitation-list", {"tenant_slug": "a"}, "post", {"email": "u1@example.com", "role": "god"},
     "role"),
    ("invitation-list", {"tenant_slug": "a"}, "post", {"email": "a-admin@example.com"}, "email"),
    ("apikey-list", {}, "post", {}, "name"),
    ("apikey-list", {}, "post", {"name": "k", "expires_at": "yesterday"}, "expires_at"),
    ("apikey-list", {}, "post", {"name": "k", "expires_at": "2001-01-01T00:00:00Z"},
     "expires_at"),
    ("me", {}, "post", {}, "tenant"),
    ("me", {}, "post", {"tenant": "bad slug!"}, "tenant"),
    ("node-set-state", {"hostname": "gpu-node-0001"}, "post", {"state": "exploded"}, "state"),
    ("node-set-state", {"hostname": "gpu-node-0001"}, "post", {}, "state"),
    ("node-mig-layout", {"hostname": "gpu-node-0001"}, "post", {"name": "c"}, "config"),
    ("node-mig-layout", {"hostname": "gpu-node-0001"}, "post",
     {"config": "version: v1\nmig-configs: {c: [{devices: all, mig-enabled: maybe}]}",
      "name": "c"}, "mig-configs.c[0].mig-enabled"),
    ("node-mig-mode", {"hostname": "gpu-node-0001"}, "put", {"reason": "r"}, "mode"),
    ("node-mig-mode", {"hostname": "gpu-node-0001"}, "put",
     {"mode": "fixed", "reason": "r"}, "mode"),
    ("node-mig-mode", {"hostname": "gpu-node-0001"}, "put", {"mode": "whole"}, "reason"),
    ("node-mig-mode", {"hostname": "gpu-node-0001"}, "put",
     {"mode": "dynamic", "gpu": 9, "reason": "r"}, "gpu"),
]


@pytest.fixture
def staff_client(db: Any) -> Any:
    tenant = make_tenant("a")
    add_member(tenant, "a-admin", Role.ADMIN)
    make_user("u1")
    cluster_generate(actor=None, spec=ClusterSpec(nodes=1, gpus_per_node=1))
    return client_for(make_user("root", staff=True))


def _counts() -> tuple[int, ...]:
    return (Tenant.objects.count(), Membership.objects.count(), ApiKey.objects.count(),
            AuditLog.objects.count())


@pytest.mark.parametrize(("name", "kwargs", "method", "body", "field"), CASES)
def test_bad_input_names_the_field(staff_client: Any, name: str, kwargs: dict[str, str],
                                   method: str, body: dict[str, Any], field: str) -> None:
    before = _counts()
    response = getattr(staff_client, method)(reverse(name, kwargs=kwargs), body, format="json")
    assert response.status_code in (400, 409), response.content
    data = response.json()
    assert data["error"] in ("invalid", "conflict") and field in data["fields"], data
    assert _counts() == before


@pytest.mark.parametrize("value", GARBAGE)
@pytest.mark.parametrize(("name", "kwargs", "method", "field"), [
    ("tenant-list", {}, "post", "name"),
    ("invitation-list", {"tenant_slug": "a"}, "post", "role"),
    ("apikey-list", {}, "post", "expires_at"),
    ("node-set-state", {"hostname": "gpu-node-0001"}, "post", "state"),
    ("node-mig-layout", {"hostname": "gpu-node-0001"}, "post", "config"),
    ("node-mig-mode", {"hostname": "gpu-node-0001"}, "put", "mode"),
    ("node-mig-mode", {"hostname": "gpu-node-0001"}, "put", "gpu"),
    ("tenant-detail", {"slug": "a"}, "patch", "contact_email"),
])
def test_garbage_values_never_500(staff_client: Any, name: str, kwargs: dict[str, str],
                                  method: str, field: str, value: Any) -> None:
    body = {"name": "n", "username": "u1", field: value}
    response = getattr(staff_client, method)(reverse(name, kwargs=kwargs), body, format="json")
    assert response.status_code < 500


def test_non_json_body_is_a_400(staff_client: Any) -> None:
    response = staff_client.post(reverse("tenant-list"), "{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == "parse_error"


def test_last_owner_cannot_be_demoted(db: Any) -> None:
    tenant = make_tenant("solo")
    owner = add_member(tenant, "boss", Role.OWNER)
    member = Membership.objects.get(user=owner)
    url = reverse("membership-detail", kwargs={"tenant_slug": "solo", "pk": member.pk})
    response = client_for(owner).patch(url, {"role": "member"}, format="json")
    assert response.status_code == 400 and "role" in response.json()["fields"]
    member.refresh_from_db()
    assert member.role == Role.OWNER


def test_admin_cannot_make_owners(db: Any) -> None:
    tenant = make_tenant("t")
    admin = add_member(tenant, "adm", Role.ADMIN)
    make_user("x")
    url = reverse("invitation-list", kwargs={"tenant_slug": "t"})
    response = client_for(admin).post(url, {"email": "x@example.com", "role": "owner"},
                                      format="json")
    assert response.status_code == 403
    assert not Membership.objects.filter(user__username="x").exists()
    assert not Invitation.objects.exists()
