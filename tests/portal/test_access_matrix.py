"""Every API route × method × caller role, and a guard that no route escapes the matrix.

World: tenant ``a`` with a viewer, a member, an admin and an owner; tenant ``b`` with
``other`` (a member of another tenant); ``staff``; anonymous. Objects named in the URLs
belong to tenant ``a`` (or to a-admin), so ``other`` must get 404 and no foreign data.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, reverse
from django.utils import timezone

from portal import api_urls
from portal.core.services import audit_record
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Gpu
from portal.leasing.models import Lease, LeaseState
from portal.tenants.models import Membership, Role
from portal.tenants.services import api_key_create
from tests.portal.factories import add_member, client_for, make_tenant, make_user

ROLES = ["anon", "other", "viewer", "member", "admin", "staff"]
A = 401, 404, 200, 200, 200, 200  # readable by anyone in tenant a
STAFF_ONLY = 401, 403, 403, 403, 403, 200
ANY_USER = 401, 200, 200, 200, 200, 200
ORDER = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}


def _row(*codes: int) -> dict[str, int]:
    return dict(zip(ROLES, codes, strict=True))


# An extension's end inside the order limits (portal/leasing/limits.py: at most 90 days).
IN_A_WEEK = (timezone.now() + timedelta(days=7)).isoformat()

# (url name, method) -> (kwargs builder key, body, expected codes by role)
MATRIX: dict[tuple[str, str], tuple[str, dict[str, Any], dict[str, int]]] = {
    ("me", "GET"): ("none", {}, _row(*ANY_USER)),
    ("me", "POST"): ("none", {"tenant": "a"}, _row(*A)),
    ("capacity", "GET"): ("none", {}, _row(*ANY_USER)),
    ("tenant-list", "GET"): ("none", {}, _row(*ANY_USER)),
    ("tenant-list", "POST"): ("none", {"name": "New Co"}, _row(401, 403, 403, 403, 403, 201)),
    ("tenant-detail", "GET"): ("tenant", {}, _row(*A)),
    ("tenant-detail", "PATCH"): ("tenant", {"name": "A2"}, _row(401, 404, 403, 403, 200, 200)),
    ("tenant-suspend", "POST"): ("tenant", {}, _row(401, 404, 403, 403, 403, 200)),
    ("tenant-resume", "POST"): ("tenant", {}, _row(401, 404, 403, 403, 403, 200)),
    ("membership-list", "GET"): ("tenant_slug", {}, _row(*A)),
    ("membership-list", "POST"): ("tenant_slug", {"username": "newbie", "role": "member"},
                                  _row(401, 404, 403, 403, 201, 201)),
    ("membership-detail", "GET"): ("membership", {}, _row(*A)),
    ("membership-detail", "PATCH"): ("membership", {"role": "viewer"},
                                     _row(401, 404, 403, 403, 200, 200)),
    ("membership-detail", "DELETE"): ("membership", {}, _row(401, 404, 403, 403, 204, 204)),
    ("apikey-list", "GET"): ("none", {}, _row(*ANY_USER)),
    ("apikey-list", "POST"): ("none", {"name": "ci"}, _row(401, 201, 201, 201, 201, 201)),
    ("apikey-detail", "GET"): ("apikey", {}, _row(401, 404, 404, 404, 200, 200)),
    ("apikey-detail", "DELETE"): ("apikey", {}, _row(401, 404, 404, 404, 204, 204)),
    ("node-list", "GET"): ("none", {}, _row(*STAFF_ONLY)),
    ("node-detail", "GET"): ("node", {}, _row(*STAFF_ONLY)),
    ("node-set-state", "POST"): ("node", {"state": "draining"}, _row(*STAFF_ONLY)),
    ("gpu-list", "GET"): ("none", {}, _row(*STAFF_ONLY)),
    ("gpu-detail", "GET"): ("gpu", {}, _row(*STAFF_ONLY)),
    ("switch-list", "GET"): ("none", {}, _row(*STAFF_ONLY)),
    ("fabric-list", "GET"): ("none", {}, _row(*STAFF_ONLY)),
    ("auditlog-list", "GET"): ("none", {}, _row(*ANY_USER)),
    ("billing-usage", "GET"): ("none", {}, _row(*ANY_USER)),
    ("billing-invoices", "GET"): ("none", {}, _row(*ANY_USER)),
    ("billing-budget", "GET"): ("none", {}, _row(401, 200, 200, 200, 200, 400)),
    ("billing-showback", "GET"): ("none", {}, _row(*ANY_USER)),
    ("auditlog-detail", "GET"): ("audit", {}, _row(401, 404, 404, 404, 200, 200)),
    # leasing: staff have no active tenant unless they pick one (404 "no tenant selected")
    ("order-create", "POST"): ("none", ORDER, _row(401, 201, 403, 201, 201, 404)),
    ("order-quote", "POST"): ("none", ORDER, _row(401, 200, 200, 200, 200, 404)),
    ("quota-usage", "GET"): ("none", {}, _row(401, 200, 200, 200, 200, 404)),
    ("lease-list", "GET"): ("none", {}, _row(*ANY_USER)),
    ("lease-detail", "GET"): ("lease", {}, _row(*A)),
    ("lease-events", "GET"): ("lease", {}, _row(*A)),
    ("lease-connection", "GET"): ("lease", {}, _row(*A)),
    ("lease-cancel", "POST"): ("lease", {}, _row(401, 404, 403, 200, 200, 200)),
    ("lease-release", "POST"): ("active_lease", {}, _row(401, 404, 403, 200, 200, 200)),
    ("lease-extend", "POST"): ("active_lease", {"end_at": IN_A_WEEK},
                               _row(401, 404, 403, 200, 200, 200)),
}

SKIP_METHODS = {"HEAD", "OPTIONS"}


def _routes(patterns: list[Any], prefix: str = "") -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for entry in patterns:
        if isinstance(entry, URLResolver):
            found |= _routes(entry.url_patterns)
            continue
        assert isinstance(entry, URLPattern)
        callback = entry.callback
        actions = getattr(callback, "actions", None)
        if actions:
            methods = {m.upper() for m in actions}
        else:
            cls = callback.view_class
            methods = {m.upper() for m in cls.http_method_names if hasattr(cls, m)}
        if entry.name and "format" not in str(entry.pattern):
            found |= {(entry.name, m) for m in methods - SKIP_METHODS}
    return found


def test_every_api_route_is_in_the_matrix() -> None:
    routes = _routes(api_urls.urlpatterns)
    assert routes - set(MATRIX) == set(), "routes without access-matrix rows"
    assert set(MATRIX) - routes == set(), "matrix rows for routes that no longer exist"


@pytest.fixture
def world(db: Any) -> dict[str, Any]:
    a, b = make_tenant("a"), make_tenant("b")
    users = {
        "viewer": add_member(a, "a-viewer", Role.VIEWER),
        "member": add_member(a, "a-member", Role.MEMBER),
        "admin": add_member(a, "a-admin", Role.ADMIN),
        "owner": add_member(a, "a-owner", Role.OWNER),
        "other": add_member(b, "b-member", Role.ADMIN),
        "staff": make_user("staff", staff=True),
        "anon": None,
    }
    make_user("newbie")
    cluster_generate(actor=None, spec=ClusterSpec(nodes=2, gpus_per_node=2))
    key = api_key_create(actor=users["admin"], name="a-key", tenant=a).key
    victim = Membership.objects.get(user=users["member"])
    entry = audit_record(actor=users["admin"], action="test.secret", tenant=a,
                         changes={"secret": "tenant-a-only"})
    audit_record(actor=users["other"], action="test.b", tenant=b)
    now = timezone.now()
    lease = Lease.objects.create(tenant=a, name="a-lease-secret", allowed_models=["H100"],
                                 start_at=now, end_at=now + timedelta(hours=1),
                                 state=LeaseState.QUEUED)
    active = Lease.objects.create(tenant=a, name="a-active-secret", allowed_models=["H100"],
                                  gpu_model="H100", start_at=now, active_at=now,
                                  end_at=now + timedelta(hours=1), state=LeaseState.ACTIVE)
    return {"users": users, "a": a, "b": b, "key": key, "membership": victim, "audit": entry,
            "lease": lease, "active_lease": active,
            "node": "gpu-node-0001", "gpu": Gpu.objects.order_by("pk").first()}


def _kwargs(kind: str, w: dict[str, Any]) -> dict[str, Any]:
    return {
        "none": {},
        "tenant": {"slug": "a"},
        "tenant_slug": {"tenant_slug": "a"},
        "membership": {"tenant_slug": "a", "pk": w["membership"].pk},
        "apikey": {"pk": w["key"].pk},
        "node": {"hostname": w["node"]},
        "gpu": {"pk": w["gpu"].pk},
        "audit": {"pk": w["audit"].pk},
        "lease": {"pk": w["lease"].pk},
        "active_lease": {"pk": w["active_lease"].pk},
    }[kind]


CASES = [(name, method, role) for (name, method) in sorted(MATRIX) for role in ROLES]


@pytest.mark.parametrize(("name", "method", "role"), CASES)
def test_access(world: dict[str, Any], name: str, method: str, role: str) -> None:
    kind, body, expected = MATRIX[(name, method)]
    url = reverse(name, kwargs=_kwargs(kind, world))
    client = client_for(world["users"][role])
    response = getattr(client, method.lower())(url, body, format="json")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert response.status_code == expected[role], (url, role, body[:300])
    text = body.decode()
    if role == "other":
        assert "tenant-a-only" not in text and "a-admin" not in text
        assert "a-lease-secret" not in text and "a-active-secret" not in text
        if response.status_code == 404:
            assert '"a"' not in text


@pytest.mark.parametrize("name", ["tenant-list", "apikey-list", "auditlog-list", "me",
                                  "lease-list", "quota-usage"])
def test_lists_hold_no_foreign_rows(world: dict[str, Any], name: str) -> None:
    response = client_for(world["users"]["other"]).get(reverse(name))
    text = response.content.decode()
    assert response.status_code == 200
    for foreign in ("tenant-a-only", "a-admin", "a-key", '"slug":"a"', "test.secret",
                    "a-lease-secret", "a-active-secret"):
        assert foreign not in text
