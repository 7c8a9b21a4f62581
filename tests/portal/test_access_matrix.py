"""Every API route × method × caller role, and a guard that no route escapes the matrix;
then every route of the site (API, pages, exports, console, agent API, admin, WebSockets) ×
every credential (``tests/portal/credential_table.py``), with the same guard.

World: tenant ``a`` with a viewer, a member, an admin and an owner; tenant ``b`` with
``other`` (a member of another tenant); ``staff``; anonymous. Objects named in the URLs
belong to tenant ``a`` (or to a-admin), so ``other`` must get 404 and no foreign data.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from rest_framework.test import APIClient

from portal import api_urls
from portal.billing.services import invoice_refresh
from portal.core.services import audit_record
from portal.inventory.generator import ClusterSpec, cluster_generate
from portal.inventory.models import Fabric, Gpu, HcaPort, StorageEndpoint
from portal.leasing.models import Lease, LeaseState
from portal.routing import websocket_urlpatterns
from portal.tenants.invitations import invitation_create
from portal.tenants.models import Membership, Role, SshPublicKey
from portal.tenants.services import api_key_create
from portal.webhooks.services import endpoint_create, messages_enqueue
from tests.portal import credential_table as table
from tests.portal.factories import add_member, client_for, make_tenant, make_user

ROLES = ["anon", "other", "viewer", "member", "admin", "staff"]
A = 401, 404, 200, 200, 200, 200  # readable by anyone in tenant a
STAFF_ONLY = 401, 403, 403, 403, 403, 200
# a mig-parted file that leaves the node whole (fixed layout, ADR 0238)
MIG_LAYOUT = {"config": "version: v1\nmig-configs:\n  all-disabled:\n"
                        "    - devices: all\n      mig-enabled: false\n",
              "name": "all-disabled"}
MIG_MODE = {"mode": "whole", "reason": "matrix"}  # the node is whole already: a no-op
ANY_USER = 401, 200, 200, 200, 200, 200
ORDER = {"models": ["H100"], "gpu_count": 1, "duration_hours": 1}
A_ADMIN_ONLY = 401, 404, 403, 403, 200, 404  # a's admins; staff without a tenant: 404
# a public literal address (no DNS): also valid under the black box's production settings
WEBHOOK = {"url": "https://93.184.215.14/hook", "events": ["budget.alert"]}


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
    # new members come by invitation (202 for any address: no account enumeration)
    ("invitation-list", "GET"): ("tenant_slug", {}, _row(401, 404, 403, 403, 200, 200)),
    ("invitation-list", "POST"): ("tenant_slug", {"email": "newbie@example.com",
                                                  "role": "member"},
                                  _row(401, 404, 403, 403, 202, 202)),
    ("invitation-detail", "DELETE"): ("invitation", {}, _row(401, 404, 403, 403, 204, 204)),
    ("invitation-accept", "POST"): ("none", {"token": "gpi_not-a-token"},
                                    _row(401, 404, 404, 404, 404, 404)),
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
    ("storage-endpoint-list", "GET"): ("none", {}, _row(*STAFF_ONLY)),
    ("storage-endpoint-list", "POST"): ("none", {"fabric": "fabric-1", "node_name": "storage-01"},
                                        _row(401, 403, 403, 403, 403, 201)),
    ("storage-endpoint-detail", "DELETE"): ("storage", {}, _row(401, 403, 403, 403, 403, 204)),
    ("auditlog-list", "GET"): ("none", {}, _row(*ANY_USER)),
    ("billing-usage", "GET"): ("none", {}, _row(*ANY_USER)),
    ("billing-invoices", "GET"): ("none", {}, _row(*ANY_USER)),
    ("billing-invoice-csv", "GET"): ("this_month", {}, _row(401, 404, 403, 403, 200, 404)),
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
    # the lease is not degraded: a member's choice is a 409, never someone else's business
    ("lease-degraded", "POST"): ("active_lease", {"choice": "continue"},
                                 _row(401, 404, 403, 409, 409, 409)),
    ("lease-faults", "GET"): ("lease", {}, _row(*A)),
    ("repair-queue", "GET"): ("none", {}, _row(*STAFF_ONLY)),
    ("node-service", "GET"): ("node", {}, _row(*STAFF_ONLY)),
    ("node-service", "POST"): ("node", {"action": "cordon", "reason": "matrix"},
                               _row(*STAFF_ONLY)),
    ("gpu-service", "POST"): ("gpu_uuid", {"action": "cordon", "reason": "matrix"},
                              _row(*STAFF_ONLY)),
    ("node-mig-layout", "POST"): ("node", MIG_LAYOUT, _row(*STAFF_ONLY)),
    ("node-mig-mode", "PUT"): ("node", MIG_MODE, _row(*STAFF_ONLY)),
    # webhooks: owners and admins of the active tenant (other: its own tenant b's list)
    ("webhook-list", "GET"): ("none", {}, _row(401, 200, 403, 403, 200, 404)),
    ("webhook-list", "POST"): ("none", WEBHOOK, _row(401, 201, 403, 403, 201, 404)),
    ("webhook-detail", "GET"): ("webhook", {}, _row(*A_ADMIN_ONLY)),
    ("webhook-detail", "PATCH"): ("webhook", {"events": ["lease.ended"]}, _row(*A_ADMIN_ONLY)),
    ("webhook-detail", "DELETE"): ("webhook", {}, _row(401, 404, 403, 403, 204, 404)),
    ("webhook-rotate-secret", "POST"): ("webhook", {}, _row(*A_ADMIN_ONLY)),
    ("webhook-deliveries", "GET"): ("webhook", {}, _row(*A_ADMIN_ONLY)),
    ("webhook-delivery-resend", "POST"): ("webhook_message", {}, _row(*A_ADMIN_ONLY)),
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
    storage = HcaPort.objects.create(fabric=Fabric.objects.get(), port_guid="0x00000000005a0001",
                                     description="storage-01 mlx5_0")
    key = api_key_create(actor=users["admin"], name="a-key", tenant=a).key
    invoice_refresh(tenant=a, month=timezone.now().date().replace(day=1))
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
    invitation = invitation_create(actor=users["admin"], tenant=a,
                                   email="invitee@example.com").invitation
    webhook = endpoint_create(actor=users["admin"], tenant=a, **WEBHOOK).endpoint
    webhook_message = messages_enqueue(tenant_id=a.pk, event="budget.alert",
                                       data={"name": "a-lease-secret"})[0]
    return {"users": users, "a": a, "b": b, "key": key, "membership": victim, "audit": entry,
            "webhook": webhook, "webhook_message": webhook_message,
            "invitation": invitation,
            "lease": lease, "active_lease": active,
            "node": "gpu-node-0001", "gpu": Gpu.objects.order_by("pk").first(),
            "storage": StorageEndpoint.objects.create(fabric=storage.fabric,
                                                      port_guid=storage.port_guid)}


def _kwargs(kind: str, w: dict[str, Any]) -> dict[str, Any]:
    return {
        "none": {},
        "tenant": {"slug": "a"},
        "tenant_slug": {"tenant_slug": "a"},
        "membership": {"tenant_slug": "a", "pk": w["membership"].pk},
        "invitation": {"tenant_slug": "a", "pk": w["invitation"].pk},
        "apikey": {"pk": w["key"].pk},
        "node": {"hostname": w["node"]},
        "gpu": {"pk": w["gpu"].pk},
        "gpu_uuid": {"uuid": w["gpu"].uuid},
        "audit": {"pk": w["audit"].pk},
        "lease": {"pk": w["lease"].pk},
        "this_month": {"year": timezone.now().year, "month": timezone.now().month},
        "active_lease": {"pk": w["active_lease"].pk},
        "storage": {"pk": w["storage"].pk},
        "webhook": {"pk": w["webhook"].pk},
        "webhook_message": {"pk": w["webhook_message"].pk},
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


# --- Every route of the site × every credential (issue 10, finding 1) ----------------------
# The table is tests/portal/credential_table.py; a route missing from it fails here.


A_SECRETS = ("tenant-a-only", "a-lease-secret", "a-active-secret", "a-victim",
             '"slug":"a"', '"tenant":"a"', "dual-a", "admin-a")


def _walk(patterns: list[Any], ns: str | None = None) -> set[tuple[str, str]]:
    """(route name, method) of every HTTP route; Django admin views fold into ``admin:*``."""
    found: set[tuple[str, str]] = set()
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = entry.namespace or None
            found |= _walk(entry.url_patterns, f"{ns}:{inner}" if ns and inner else inner or ns)
            continue
        if ns == "admin":
            found.add(("admin:*", "GET"))
            continue
        assert entry.name, f"unnamed route {entry.pattern} (name it, then list it)"
        name = f"{ns}:{entry.name}" if ns else entry.name
        actions = getattr(entry.callback, "actions", None)
        view_class = getattr(entry.callback, "view_class", None)
        if actions:
            methods = {m.upper() for m in actions} - SKIP_METHODS
        elif view_class is not None:
            methods = {m.upper() for m in view_class.http_method_names
                       if hasattr(view_class, m)} - SKIP_METHODS
        else:  # function views: the methods the table names for them
            methods = _TABLE_METHODS.get(name, {"?"})
        found |= {(name, m) for m in methods}
    return found


_TABLE_METHODS = {name: {case[0] for case in cases} for name, cases in table.ROUTES.items()
                  if not name.startswith("admin")}


def test_every_route_is_in_the_credential_table() -> None:
    routes = _walk(get_resolver().url_patterns)
    listed = {(name, case[0]) for name, cases in table.ROUTES.items() for case in cases}
    # class-based views: every method they serve must be listed, and vice versa
    assert routes - listed == set(), "routes without credential-matrix rows"
    assert listed - routes == set(), "credential-matrix rows for routes that no longer exist"
    ws = {str(p.pattern) for p in websocket_urlpatterns}
    assert ws == set(table.WS_ROUTES), "WebSocket routes and the table differ"


@pytest.fixture
def cred_world(db: Any) -> dict[str, Any]:
    return _build_cred_world()


def _build_cred_world() -> dict[str, Any]:
    a, b = make_tenant("a"), make_tenant("b")
    admin = add_member(a, "a-admin", Role.ADMIN)
    viewer = add_member(a, "a-viewer", Role.VIEWER)
    dual = add_member(a, "dual", Role.ADMIN)
    Membership.objects.create(tenant=b, user=dual, role=Role.ADMIN)
    removed = add_member(a, "ex-admin", Role.ADMIN)
    removed_key = api_key_create(actor=removed, name="stale", tenant=a).secret
    Membership.objects.filter(user=removed).delete()
    add_member(a, "a-victim", Role.MEMBER)
    make_user("newbie")
    cluster_generate(actor=None, spec=ClusterSpec(nodes=2, gpus_per_node=2))
    own = api_key_create(actor=dual, name="dual-a", tenant=a)
    other = api_key_create(actor=dual, name="dual-b", tenant=b)
    admin_key = api_key_create(actor=admin, name="admin-a", tenant=a).key
    entry = audit_record(actor=admin, action="test.secret", tenant=a,
                         changes={"secret": "tenant-a-only"})
    now = timezone.now()
    lease = Lease.objects.create(tenant=a, name="a-lease-secret", allowed_models=["H100"],
                                 start_at=now, end_at=now + timedelta(hours=1),
                                 state=LeaseState.QUEUED)
    active = Lease.objects.create(tenant=a, name="a-active-secret", allowed_models=["H100"],
                                  gpu_model="H100", start_at=now, active_at=now,
                                  end_at=now + timedelta(hours=1), state=LeaseState.ACTIVE)
    ssh = SshPublicKey.objects.create(user=admin, name="laptop", key_type="ssh-ed25519",
                                      public_key="ssh-ed25519 AAAA", fingerprint="SHA256:x")
    invitation = invitation_create(actor=admin, tenant=a, email="invitee@example.com").invitation
    invoice_refresh(tenant=a, month=timezone.now().date().replace(day=1))
    webhook = endpoint_create(actor=admin, tenant=a, **WEBHOOK).endpoint
    webhook_message = messages_enqueue(tenant_id=a.pk, event="budget.alert",
                                       data={"name": "a-lease-secret"})[0]
    return {"webhook": webhook, "webhook_message": webhook_message,
            "invitation": invitation, "users": {"browser": admin, "viewer": viewer, "removed": removed},
            "secrets": {"own_key": own.secret, "other_key": other.secret,
                        "removed": removed_key},
            "apikey": own.key, "admin_key": admin_key, "audit": entry, "lease": lease,
            "active_lease": active, "ssh": ssh, "admin": admin,
            "membership": Membership.objects.get(user__username="a-victim"),
            "gpu": Gpu.objects.order_by("pk").first()}


def _cred_kwargs(kind: str, w: dict[str, Any]) -> dict[str, Any]:
    reset = {"uidb64": urlsafe_base64_encode(force_bytes(w["admin"].pk)), "token": "set-password"}
    return {
        "none": {}, "tenant": {"slug": "a"}, "tenant_slug": {"tenant_slug": "a"},
        "membership": {"tenant_slug": "a", "pk": w["membership"].pk},
        "invitation": {"tenant_slug": "a", "pk": w["invitation"].pk},
        "invitation_id": {"invitation_id": w["invitation"].pk},
        "bad_token": {"token": "gpi_not-a-token"},
        "missing_pk": {"pk": 999_999},
        "this_month": {"year": timezone.now().year, "month": timezone.now().month},
        "apikey": {"pk": w["apikey"].pk}, "node": {"hostname": "gpu-node-0001"},
        "node_id": {"node_id": "gpu-node-0001"}, "gpu": {"pk": w["gpu"].pk},
        "gpu_uuid": {"uuid": w["gpu"].uuid},
        "audit": {"pk": w["audit"].pk}, "lease": {"pk": w["lease"].pk},
        "active_lease": {"pk": w["active_lease"].pk}, "lease_id": {"lease_id": w["lease"].pk},
        "active_lease_id": {"lease_id": w["active_lease"].pk},
        "sshkey": {"key_id": w["ssh"].pk}, "member_id": {"member_id": w["membership"].pk},
        "console_member": {"slug": "a", "member_id": w["membership"].pk},
        "console_invitation": {"slug": "a", "invitation_id": w["invitation"].pk},
        "key_id": {"key_id": w["admin_key"].pk}, "reset": reset,
        "webhook": {"pk": w["webhook"].pk},
        "webhook_message": {"pk": w["webhook_message"].pk},
        "endpoint_id": {"endpoint_id": w["webhook"].pk},
        "message_id": {"message_id": w["webhook_message"].pk},
        "sso_provider": {"name": "no-such-idp"},
    }[kind]


_WRITE_KINDS = {"member_id", "sshkey", "key_id", "invitation_id"}


def _state(kind: str, w: dict[str, Any]) -> Any:
    """What a write to the object of ``kind`` would change (None: nothing tracked)."""
    if kind in ("member_id", "membership", "console_member"):
        row = Membership.objects.filter(pk=w["membership"].pk).values_list("role", "max_gpus")
        return list(row)
    if kind == "sshkey":
        return SshPublicKey.objects.filter(pk=w["ssh"].pk).exists()
    if kind in ("invitation", "invitation_id", "console_invitation"):
        from portal.tenants.models import Invitation
        return Invitation.objects.filter(pk=w["invitation"].pk).values_list("revoked_at",
                                                                            flat=True).first()
    if kind in ("key_id", "apikey"):
        from portal.tenants.models import ApiKey
        pk = w["admin_key"].pk if kind == "key_id" else w["apikey"].pk
        return ApiKey.objects.filter(pk=pk).values_list("revoked_at", flat=True).first()
    if kind in ("lease", "active_lease", "lease_id", "active_lease_id"):
        lease = w["active_lease" if "active" in kind else "lease"]
        return list(Lease.objects.filter(pk=lease.pk).values_list("state", "end_at"))
    if kind in ("webhook", "webhook_message", "endpoint_id", "message_id"):
        from portal.webhooks.models import Endpoint, Message
        return (list(Endpoint.objects.filter(pk=w["webhook"].pk)
                     .values_list("events", "secret", "enabled")),
                list(Message.objects.filter(pk=w["webhook_message"].pk)
                     .values_list("status", "manual", "next_attempt_at")))
    if kind in ("tenant", "tenant_slug"):
        return (list(Membership.objects.filter(tenant__slug="a").values_list("user_id", "role")
                     .order_by("user_id")),
                list(type(w["membership"].tenant).objects.filter(slug="a")
                     .values_list("name", "status")))
    return None


def _client(credential: str, w: dict[str, Any]) -> APIClient:
    client = APIClient()
    if credential in w["users"]:
        client.force_login(w["users"][credential])
    if credential in w["secrets"]:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {w['secrets'][credential]}")
    return client


def _url(name: str, kind: str, w: dict[str, Any]) -> str:
    if name == "admin:*":
        return reverse("admin:index")
    return reverse(name, kwargs=_cred_kwargs(kind, w))


CRED_CASES = [(name, i, cred) for name in sorted(table.ROUTES)
              for i in range(len(table.ROUTES[name])) for cred in table.CREDENTIALS]


@pytest.mark.parametrize(("name", "index", "credential"), CRED_CASES)
def test_credential_access(cred_world: dict[str, Any], settings: Any, name: str, index: int,
                           credential: str) -> None:
    settings.AXES_ENABLED = False
    method, kind, body, expected = table.ROUTES[name][index]
    url = _url(name, kind, cred_world)
    client = _client(credential, cred_world)
    call = getattr(client, method.lower())
    before = _state(kind, cred_world)
    if method == "GET":
        response = call(url, body)
    else:
        page = not url.startswith("/api/")
        member = str(cred_world["membership"].pk)
        body = {k.replace("{member}", member): v for k, v in body.items()}
        response = call(url, body, format="multipart" if page else "json")
    after = _state(kind, cred_world)
    if method != "GET" and (credential in ("other_key", "removed")
                            or response.status_code >= 400):
        assert after == before, (url, credential, "a refused write changed something")
    if method != "GET" and credential == "browser" and name.startswith("web:") \
            and kind in _WRITE_KINDS:
        assert after != before, (url, "the page write did not take effect")
    content = b"".join(response.streaming_content) if response.streaming else response.content
    text = content.decode(errors="replace")
    want = table.expected(expected, credential, url)
    if want == table.LOGIN:
        assert response.status_code == 302, (url, credential, text[:300])
        assert response["Location"].startswith(settings.LOGIN_URL), response["Location"]
    else:
        assert response.status_code == want, (url, credential, text[:300])
    if credential in ("other_key", "removed"):
        for secret in A_SECRETS:
            assert secret not in text, (url, credential, secret)


@pytest.fixture
def cred_world_tx(transactional_db: Any) -> dict[str, Any]:
    """The same world, committed: the socket's consumer reads it from other threads."""
    return _build_cred_world()


async def _socket_outcome(headers: list[tuple[bytes, bytes]], lease_id: Any) -> int | str:
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    app = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
    comm = WebsocketCommunicator(app, f"/ws/leases/{lease_id}/", headers=headers)
    connected, _ = await comm.connect(timeout=10)
    assert connected
    out = await comm.receive_output(timeout=10)
    if out["type"] == "websocket.close":
        await comm.wait()
        return int(out["code"])
    await comm.disconnect()
    return table.ACCEPT


WS_CASES = [(route, cred) for route in sorted(table.WS_ROUTES) for cred in table.CREDENTIALS]


@pytest.mark.parametrize(("route", "credential"), WS_CASES)
def test_credential_access_websocket(cred_world_tx: dict[str, Any], settings: Any, route: str,
                                     credential: str) -> None:
    """Sockets authenticate by the browser session cookie only (Channels'
    AuthMiddlewareStack): a key is nobody, a removed member's session sees nothing."""
    from asgiref.sync import async_to_sync

    assert route == "ws/leases/<uuid:lease_id>/"  # one socket route today; add a builder per new one
    w = cred_world_tx
    headers: list[tuple[bytes, bytes]] = [(b"origin", b"http://testserver")]
    if credential in w["users"]:
        client = APIClient()
        client.force_login(w["users"][credential])
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    if credential in w["secrets"]:
        headers.append((b"authorization", f"Bearer {w['secrets'][credential]}".encode()))
    outcome = async_to_sync(_socket_outcome)(headers, w["active_lease"].pk)
    assert outcome == table.WS_ROUTES[route][credential]
