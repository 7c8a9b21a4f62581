"""The black-box harness's world, seeded into the live stack's database in a subprocess
(``python -m tests.security.blackbox_world``, run with the stack's environment).

Modelled on ``tests/portal/test_access_matrix.py``'s credential world, on the stack's own
inventory (no extra nodes): tenant ``a`` (``a-admin``, ``a-viewer``, ``dual``, ``a-victim``,
``a-leaver`` and ``ex-admin`` who was removed after making a key), tenant ``b`` (``dual``
again, ``b-admin``). Prints one JSON line: passwords, key secrets, ids, and every case of
``tests/portal/credential_table.py`` as (route, index, method, URL, body) for these objects.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
from datetime import timedelta
from typing import Any

ACTIVE_PLACEHOLDER = "00000000-0000-4000-8000-00000000ac7e"


def ssh_key(seed: str) -> str:
    """A well-formed ssh-ed25519 public key line, derived from ``seed``."""
    raw = hashlib.sha256(seed.encode()).digest()
    blob = b"".join(struct.pack(">I", len(p)) + p for p in (b"ssh-ed25519", raw))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {seed}@blackbox"


def _users() -> dict[str, Any]:
    from portal.tenants.models import Membership, Role
    from tests.portal.factories import add_member, make_tenant, make_user

    a, b = make_tenant("a"), make_tenant("b")
    users = {"admin": add_member(a, "a-admin", Role.ADMIN),
             "viewer": add_member(a, "a-viewer", Role.VIEWER),
             "dual": add_member(a, "dual", Role.ADMIN),
             "victim": add_member(a, "a-victim", Role.MEMBER),
             "leaver": add_member(a, "a-leaver", Role.MEMBER),
             "removed": add_member(a, "ex-admin", Role.ADMIN),
             "runner": add_member(a, "a-runner", Role.MEMBER),
             "b_admin": add_member(b, "b-admin", Role.ADMIN)}
    Membership.objects.create(tenant=b, user=users["dual"], role=Role.ADMIN)
    make_user("newbie")
    return {"a": a, "b": b, "users": users}


def _objects(w: dict[str, Any]) -> dict[str, Any]:
    from django.utils import timezone

    from portal.billing.services import invoice_refresh
    from portal.core.services import audit_record
    from portal.leasing.models import Lease, LeaseState, Quota
    from portal.tenants.invitations import invitation_create
    from portal.tenants.models import Membership
    from portal.tenants.services import api_key_create, ssh_key_add
    from portal.webhooks.services import endpoint_create, messages_enqueue
    from tests.portal import credential_table as table

    a, b, u = w["a"], w["b"], w["users"]
    for tenant in (a, b):
        Quota.objects.create(tenant=tenant, gpu_model="H100", max_gpus=16,
                             guaranteed_gpus=8, max_pending_orders=20)
    stale = api_key_create(actor=u["removed"], name="stale", tenant=a).secret
    Membership.objects.filter(user=u["removed"]).delete()
    own = api_key_create(actor=u["dual"], name="dual-a", tenant=a)
    other = api_key_create(actor=u["dual"], name="dual-b", tenant=b)
    b_key = api_key_create(actor=u["b_admin"], name="b-key", tenant=b).secret
    runner = api_key_create(actor=u["runner"], name="runner-a", tenant=a).secret
    admin_key = api_key_create(actor=u["admin"], name="admin-a", tenant=a)
    keys = {name: ssh_key_add(actor=u[who], name=name, public_key=ssh_key(name))
            for name, who in (("laptop", "admin"), ("revoke-me", "admin"),
                              ("victim-key", "victim"), ("leaver-key", "leaver"),
                              ("b-key", "b_admin"))}
    entry = audit_record(actor=u["admin"], action="test.secret", tenant=a,
                         changes={"secret": "tenant-a-only"})
    now = timezone.now()
    lease = Lease.objects.create(tenant=a, name="a-lease-secret", allowed_models=["H100"],
                                 start_at=now + timedelta(days=30),
                                 end_at=now + timedelta(days=30, hours=1),
                                 state=LeaseState.QUEUED)
    invitation = invitation_create(actor=u["admin"], tenant=a,
                                   email="invitee@example.com").invitation
    invoice_refresh(tenant=a, month=now.date().replace(day=1))
    webhook = endpoint_create(actor=u["admin"], tenant=a, **table.WEBHOOK).endpoint
    webhook_message = messages_enqueue(tenant_id=a.pk, event="budget.alert",
                                       data={"name": "a-lease-secret"})[0]
    return {"webhook": webhook, "webhook_message": webhook_message, "secrets": {"own_key": own.secret, "other_key": other.secret, "removed": stale,
                        "b_key": b_key, "runner": runner},
            "apikey": own.key, "admin_key": admin_key.key, "audit": entry, "lease": lease,
            "invitation": invitation, "ssh": keys["laptop"], "ssh_keys": keys,
            "membership": Membership.objects.get(user=u["victim"]),
            "leaver": Membership.objects.get(user=u["leaver"])}


def _kwargs(kind: str, w: dict[str, Any]) -> dict[str, Any]:
    from django.utils import timezone
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    from portal.inventory.models import Gpu, Node

    node = Node.objects.order_by("hostname").first()
    reset = {"uidb64": urlsafe_base64_encode(force_bytes(w["users"]["admin"].pk)),
             "token": "set-password"}
    lease, active = w["lease"].pk, ACTIVE_PLACEHOLDER  # the harness's own running lease
    return {
        "none": {}, "tenant": {"slug": "a"}, "tenant_slug": {"tenant_slug": "a"},
        "membership": {"tenant_slug": "a", "pk": w["membership"].pk},
        "console_member": {"slug": "a", "member_id": w["membership"].pk},
        "console_invitation": {"slug": "a", "invitation_id": w["invitation"].pk},
        "invitation": {"tenant_slug": "a", "pk": w["invitation"].pk},
        "invitation_id": {"invitation_id": w["invitation"].pk},
        "bad_token": {"token": "gpi_not-a-token"}, "missing_pk": {"pk": 999_999},
        "this_month": {"year": timezone.now().year, "month": timezone.now().month},
        "apikey": {"pk": w["apikey"].pk}, "node": {"hostname": node.hostname if node else "x"},
        "node_id": {"node_id": "nd_0000000000000000"},
        "gpu": {"pk": Gpu.objects.order_by("pk").values_list("pk", flat=True).first()},
        "gpu_uuid": {"uuid": Gpu.objects.order_by("pk").values_list("uuid", flat=True).first()
                     or "GPU-none"},
        "audit": {"pk": w["audit"].pk}, "lease": {"pk": lease}, "active_lease": {"pk": active},
        "lease_id": {"lease_id": lease}, "active_lease_id": {"lease_id": active},
        "sshkey": {"key_id": w["ssh"].pk}, "member_id": {"member_id": w["membership"].pk},
        "key_id": {"key_id": w["admin_key"].pk}, "reset": reset,
        "webhook": {"pk": w["webhook"].pk}, "webhook_message": {"pk": w["webhook_message"].pk},
        "endpoint_id": {"endpoint_id": w["webhook"].pk},
        "message_id": {"message_id": w["webhook_message"].pk},
        "sso_provider": {"name": "no-such-idp"},
    }[kind]


def _cases(w: dict[str, Any]) -> list[dict[str, Any]]:
    from django.urls import reverse

    from tests.portal import credential_table as table

    member = str(w["membership"].pk)
    out = []
    for name in sorted(table.ROUTES):
        for index, (method, kind, body, expected) in enumerate(table.ROUTES[name]):
            url = reverse("admin:index") if name == "admin:*" else reverse(
                name, kwargs=_kwargs(kind, w))
            body = {k.replace("{member}", member): v for k, v in body.items()}
            out.append({"route": name, "index": index, "method": method, "kind": kind,
                        "url": url, "body": body, "expected": expected})
    return out


def seed() -> dict[str, Any]:
    import django

    django.setup()
    from django.db import transaction

    from tests.portal.factories import PASSWORD

    with transaction.atomic():
        w = _users()
        w.update(_objects(w))
    return {"password": PASSWORD, "secrets": w["secrets"], "cases": _cases(w),
            "tenant_a": str(w["a"].pk), "tenant_b": str(w["b"].pk),
            "victim_membership": w["membership"].pk, "leaver_membership": w["leaver"].pk,
            "ssh_keys": {n: {"id": str(k.pk), "line": k.public_key}
                         for n, k in w["ssh_keys"].items()}}


if __name__ == "__main__":
    json.dump(seed(), sys.stdout, default=str)
    sys.stdout.write("\n")
