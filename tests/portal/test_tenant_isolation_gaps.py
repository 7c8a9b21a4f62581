"""Issue 10 isolation gaps in tenants: staff through a bound key, the Django admin and the
last-admin rule, keys of removed members."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from portal.core.errors import PermissionDenied
from portal.core.models import AuditLog
from portal.tenants import services
from portal.tenants.models import ApiKey, Membership, Role, Tenant
from portal.tenants.principal import bind_key
from tests.portal.factories import add_member, make_tenant, make_user


def _bound(user: Any, tenant: Tenant | None) -> Any:
    """``user`` acting through a fresh key bound to ``tenant`` (as the API would)."""
    issued = services.api_key_create(actor=user, name="k", tenant=tenant)
    bind_key(user, issued.key)
    return user


def _bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


# 3. staff through a tenant-bound key -------------------------------------------------

def test_bound_staff_key_acts_as_staff_in_its_tenant_only(db: Any) -> None:
    """The gate lets a staff key bound to a tenant pass every role check there; the owner
    checks used ``is_staff`` (false through a bound key), so the same key that may act as
    admin was refused "only an owner can make owners"."""
    a, b = make_tenant("a"), make_tenant("b")
    add_member(a, "olga", Role.OWNER)
    ann = add_member(a, "ann", Role.MEMBER)
    bob = add_member(b, "bob", Role.MEMBER)
    staff = make_user("root", staff=True)
    Membership.objects.create(tenant=b, user=staff, role=Role.VIEWER)
    actor = _bound(staff, a)
    member = Membership.objects.get(user=ann)
    services.membership_change_role(actor=actor, member=member, role=Role.OWNER)
    assert Membership.objects.get(user=ann).role == Role.OWNER
    # never platform staff, and nothing in another tenant (even one the user belongs to)
    with pytest.raises(PermissionDenied):
        services.tenant_set_status(actor=actor, tenant=b, status="suspended")
    with pytest.raises(services.NotFound):
        services.membership_change_role(actor=actor, member=Membership.objects.get(user=bob),
                                        role=Role.OWNER)
    assert Membership.objects.get(user=bob).role == Role.MEMBER


def test_bound_key_revokes_only_keys_of_its_tenant(db: Any) -> None:
    a, b = make_tenant("a"), make_tenant("b")
    alice = add_member(a, "alice", Role.MEMBER)
    Membership.objects.create(tenant=b, user=alice, role=Role.MEMBER)
    other = services.api_key_create(actor=alice, name="b", tenant=b).key
    actor = _bound(alice, a)
    with pytest.raises(services.NotFound):
        services.api_key_revoke(actor=actor, key=other)
    assert ApiKey.objects.get(pk=other.pk).revoked_at is None


# 4. the Django admin keeps the last-admin rule -----------------------------------------

@pytest.fixture
def site(db: Any) -> Client:
    client = Client()
    client.force_login(make_user("super", staff=True, is_superuser=True))
    return client


def test_admin_cannot_demote_the_last_admin(site: Client) -> None:
    tenant = make_tenant("a")
    olga = add_member(tenant, "olga", Role.OWNER)
    member = Membership.objects.get(user=olga)
    response = site.post(reverse("admin:tenants_membership_change", args=[member.pk]),
                         {"role": "viewer", "max_gpus": ""})
    assert response.status_code == 200  # the form again, with the message
    assert "at least one owner" in str(response.context["adminform"].form.errors["role"])
    assert Membership.objects.get(pk=member.pk).role == Role.OWNER


def test_admin_cannot_demote_the_last_admin_below_admin(site: Client) -> None:
    tenant = make_tenant("a")
    add_member(tenant, "olga", Role.OWNER)
    adam = add_member(tenant, "adam", Role.ADMIN)
    Membership.objects.filter(user__username="olga").update(role=Role.MEMBER)
    member = Membership.objects.get(user=adam)
    response = site.post(reverse("admin:tenants_membership_change", args=[member.pk]),
                         {"role": "viewer", "max_gpus": ""})
    assert response.status_code == 200
    assert services.last_admin_message() in str(
        response.context["adminform"].form.errors["role"])
    assert Membership.objects.get(pk=member.pk).role == Role.ADMIN


def test_admin_cannot_delete_the_last_admin(site: Client) -> None:
    tenant = make_tenant("a")
    olga = add_member(tenant, "olga", Role.OWNER)
    member = Membership.objects.get(user=olga)
    response = site.post(reverse("admin:tenants_membership_delete", args=[member.pk]),
                         {"post": "yes"}, follow=True)
    assert Membership.objects.filter(pk=member.pk).exists()
    assert "last owner" in response.content.decode() or "at least one owner" in \
        response.content.decode()


def test_admin_bulk_removal_keeps_the_last_admin(site: Client) -> None:
    tenant = make_tenant("a")
    olga = add_member(tenant, "olga", Role.OWNER)
    ann = add_member(tenant, "ann", Role.MEMBER)
    ids = [str(m.pk) for m in Membership.objects.filter(user__in=[olga, ann])]
    for action in ("delete_selected", "remove_members"):
        site.post(reverse("admin:tenants_membership_changelist"),
                  {"action": action, "_selected_action": ids, "post": "yes"})
    assert list(Membership.objects.values_list("user__username", flat=True)) == ["olga"]


def test_admin_tenant_inline_cannot_delete_members(site: Client) -> None:
    tenant = make_tenant("a")
    add_member(tenant, "olga", Role.OWNER)
    page = site.get(reverse("admin:tenants_tenant_change", args=[tenant.pk])).content.decode()
    assert "memberships-0-DELETE" not in page and "memberships-0-role" not in page


def test_admin_role_change_goes_through_the_service(site: Client) -> None:
    tenant = make_tenant("a")
    add_member(tenant, "olga", Role.OWNER)
    ann = add_member(tenant, "ann", Role.MEMBER)
    member = Membership.objects.get(user=ann)
    response = site.post(reverse("admin:tenants_membership_change", args=[member.pk]),
                         {"role": "admin", "max_gpus": "4"})
    assert response.status_code == 302, response.content[:2000]
    member.refresh_from_db()
    assert (member.role, member.max_gpus) == (Role.ADMIN, 4)
    assert AuditLog.objects.filter(action="membership.update").exists()


def test_admin_adds_a_member_through_the_service(site: Client) -> None:
    tenant = make_tenant("a")
    newbie = make_user("newbie")
    response = site.post(reverse("admin:tenants_membership_add"),
                         {"tenant": tenant.pk, "user": newbie.pk, "role": "member",
                          "max_gpus": ""})
    assert response.status_code == 302, response.content[:2000]
    assert Membership.objects.get(user=newbie).role == Role.MEMBER
    assert AuditLog.objects.filter(action="membership.create").exists()


# 7. keys of removed members ---------------------------------------------------------------

def test_removed_member_keys_are_revoked_in_the_same_transaction(db: Any) -> None:
    tenant = make_tenant("a")
    olga = add_member(tenant, "olga", Role.OWNER)
    ann = add_member(tenant, "ann", Role.MEMBER)
    issued = services.api_key_create(actor=ann, name="ci", tenant=tenant)
    assert _bearer(issued.secret).get(reverse("me")).status_code == 200
    services.membership_remove(actor=olga, member=Membership.objects.get(user=ann))
    assert ApiKey.objects.get(pk=issued.key.pk).revoked_at is not None
    assert AuditLog.objects.filter(action="apikey.revoke").count() == 1
    response = _bearer(issued.secret).get(reverse("me"))
    assert response.status_code == 401


def test_stale_key_of_a_removed_member_answers_401(db: Any) -> None:
    """A key left from before removals revoked keys (or a row deleted behind the services'
    back) no longer authenticates to act for nobody."""
    tenant = make_tenant("a")
    ann = add_member(tenant, "ann", Role.MEMBER)
    issued = services.api_key_create(actor=ann, name="ci", tenant=tenant)
    Membership.objects.filter(user=ann).delete()
    assert _bearer(issued.secret).get(reverse("me")).status_code == 401
