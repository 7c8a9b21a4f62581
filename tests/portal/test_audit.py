from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, transaction
from django.test import Client
from django.urls import reverse

from portal.core.models import AuditLog
from portal.tenants.models import Role
from tests.portal.factories import PASSWORD, add_member, client_for, make_tenant, make_user


def test_service_writes_are_audited_with_actor_and_changes(db: Any) -> None:
    staff = make_user("root", staff=True)
    client_for(staff).post(reverse("tenant-list"), {"name": "Acme"}, format="json")
    client_for(staff).patch(reverse("tenant-detail", kwargs={"slug": "acme"}),
                            {"name": "Acme AI"}, format="json")
    entries = list(AuditLog.objects.order_by("id").values_list("action", "actor_repr", "changes"))
    assert entries[0][:2] == ("tenant.create", "root")
    assert entries[1] == ("tenant.update", "root", {"name": ["Acme", "Acme AI"]})


def test_login_and_failed_login_are_audited_with_address(db: Any) -> None:
    make_user("alice")
    client = Client(REMOTE_ADDR="10.1.2.3")
    client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    client.post(reverse("login"), {"username": "alice", "password": PASSWORD})
    actions = list(AuditLog.objects.order_by("id").values_list("action", "actor_repr", "ip"))
    assert ("auth.login_failed", "alice", "10.1.2.3") in actions
    assert ("auth.login", "alice", "10.1.2.3") in actions


def test_lockout_after_repeated_failures(db: Any, settings: Any) -> None:
    make_user("bob")
    client = Client(REMOTE_ADDR="10.9.9.9")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post(reverse("login"), {"username": "bob", "password": "nope"})
    response = client.post(reverse("login"), {"username": "bob", "password": PASSWORD})
    assert response.status_code in (403, 429)
    assert "_auth_user_id" not in client.session


def test_audit_entries_are_append_only_in_python(db: Any) -> None:
    entry = AuditLog.objects.create(action="x")
    entry.action = "y"
    with pytest.raises(ValueError, match="append-only"):
        entry.save()
    with pytest.raises(ValueError, match="append-only"):
        entry.delete()


@pytest.mark.services("postgres")
def test_audit_entries_are_append_only_in_postgres(db: Any) -> None:
    tenant = make_tenant("a")
    entry = AuditLog.objects.create(action="x", tenant=tenant)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditLog.objects.filter(pk=entry.pk).update(action="forged")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditLog.objects.filter(pk=entry.pk).delete()
    tenant.delete()  # ON DELETE SET NULL is still allowed
    entry.refresh_from_db()
    assert entry.tenant_id is None and entry.action == "x"


def test_tenant_admin_sees_only_own_tenant_audit(db: Any) -> None:
    a, b = make_tenant("a"), make_tenant("b")
    admin = add_member(a, "a-admin", Role.ADMIN)
    AuditLog.objects.create(action="in-a", tenant=a)
    AuditLog.objects.create(action="in-b", tenant=b)
    body = client_for(admin).get(reverse("auditlog-list")).json()
    assert [r["action"] for r in body["results"]] == ["in-a"]
