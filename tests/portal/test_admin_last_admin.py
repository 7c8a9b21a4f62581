"""Regression: Django's user admin deactivated or deleted a tenant's last owner/admin,
skipping the rule the services keep (``services.user_set_active``), and left the tenant
with nobody able to manage it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from portal.core.models import AuditLog
from portal.tenants.models import Membership, Role
from tests.portal.factories import make_tenant, make_user


def _change(client: Any, user: Any, **overrides: Any) -> Any:
    url = reverse("admin:auth_user_change", args=[user.pk])
    data = {"username": user.username, "email": user.email, "is_active": "on",
            "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00", **overrides}
    data = {k: v for k, v in data.items() if v is not None}
    return client.post(url, data)


@pytest.fixture
def setup(db: Any, client: Any) -> dict[str, Any]:
    staff = make_user("root", staff=True, is_superuser=True)
    client.force_login(staff)
    tenant = make_tenant("acme")
    owner = make_user("olga")
    Membership.objects.create(tenant=tenant, user=owner, role=Role.OWNER)
    return {"tenant": tenant, "owner": owner}


def test_admin_refuses_to_deactivate_the_last_owner(setup: dict[str, Any], client: Any) -> None:
    owner = setup["owner"]
    resp = _change(client, owner, is_active=None)
    assert resp.status_code == 200  # the form again, with the error on is_active
    assert "is_active" in resp.context["adminform"].form.errors
    owner.refresh_from_db()
    assert owner.is_active


def test_admin_deactivates_through_the_service_when_another_admin_remains(
        setup: dict[str, Any], client: Any) -> None:
    owner = setup["owner"]
    Membership.objects.create(tenant=setup["tenant"], user=make_user("ada"), role=Role.ADMIN)
    resp = _change(client, owner, is_active=None)
    assert resp.status_code == 302, resp.content[:500]
    owner.refresh_from_db()
    assert not owner.is_active
    assert AuditLog.objects.filter(action="user.deactivate", object_id=str(owner.pk)).exists()


def test_admin_refuses_to_delete_the_last_owner(setup: dict[str, Any], client: Any) -> None:
    owner = setup["owner"]
    resp = client.post(reverse("admin:auth_user_delete", args=[owner.pk]), {"post": "yes"})
    assert resp.status_code == 403
    assert get_user_model().objects.filter(pk=owner.pk).exists()
    resp = client.post(reverse("admin:auth_user_changelist"),
                       {"action": "delete_selected", "_selected_action": [owner.pk],
                        "post": "yes"})
    assert get_user_model().objects.filter(pk=owner.pk).exists()
