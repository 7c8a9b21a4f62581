"""Issue 13: "member management for a tenant in the console". Old code: the console's
tenant page showed quotas, contracts, credits and invoices but no members, so an operator
could not invite, re-role or remove anyone without the Django admin (which skips the
last-admin rule and the access push). Now /console/tenants/<slug>/ lists the members and
open invitations, and each change goes through the tenants services (audited)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

from portal.core.models import AuditLog
from portal.tenants.models import Invitation, Membership, Role
from tests.portal.factories import add_member, make_tenant, make_user


@pytest.fixture
def world(db: Any, settings: Any) -> dict[str, Any]:
    settings.AXES_ENABLED = False
    tenant = make_tenant("a")
    staff = make_user("ops", staff=True)
    client = Client()
    client.force_login(staff)
    return {"tenant": tenant, "staff": staff, "client": client,
            "boss": add_member(tenant, "a-boss", Role.ADMIN),
            "dev": add_member(tenant, "a-dev", Role.MEMBER),
            "page": reverse("console:tenant", args=["a"])}


def _member(world: dict[str, Any], name: str) -> Membership:
    return Membership.objects.get(tenant=world["tenant"], user__username=name)


def test_console_members_listed_on_the_tenant_page(world: dict[str, Any]) -> None:
    body = world["client"].get(world["page"]).content.decode()
    assert 'id="members"' in body
    assert 'data-member="a-boss"' in body and 'data-member="a-dev"' in body


def test_console_members_invite_sends_an_invitation(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        r = world["client"].post(reverse("console:member_invite", args=["a"]),
                                 {"invite-email": "New@Example.com", "invite-role": "viewer"})
    assert r.status_code == 302 and r["Location"].endswith("#members")
    invitation = Invitation.objects.get(tenant=world["tenant"])
    assert (invitation.email, invitation.role) == ("new@example.com", "viewer")
    assert len(mail.outbox) == 1
    assert AuditLog.objects.filter(action="invitation.create", tenant=world["tenant"]).exists()
    assert "new@example.com" in world["client"].get(world["page"]).content.decode()


def test_console_members_invite_bad_email_is_a_400_naming_the_field(
        world: dict[str, Any]) -> None:
    r = world["client"].post(reverse("console:member_invite", args=["a"]),
                             {"invite-email": "not-an-address", "invite-role": "member"})
    assert r.status_code == 400
    assert 'id="id_invite-email_error"' in r.content.decode()
    assert not Invitation.objects.exists()


def test_console_members_change_role_is_audited(world: dict[str, Any]) -> None:
    dev = _member(world, "a-dev")
    r = world["client"].post(reverse("console:member_role", args=["a", dev.pk]),
                             {f"role-{dev.pk}-role": "admin"})
    assert r.status_code == 302
    dev.refresh_from_db()
    assert dev.role == "admin"
    entry = AuditLog.objects.get(action="membership.update", tenant=world["tenant"])
    assert entry.changes == {"role": ["member", "admin"]}


def test_console_members_bad_role_is_a_400_and_changes_nothing(world: dict[str, Any]) -> None:
    dev = _member(world, "a-dev")
    r = world["client"].post(reverse("console:member_role", args=["a", dev.pk]),
                             {f"role-{dev.pk}-role": "emperor"})
    assert r.status_code == 400 and "Role" in r.content.decode()
    dev.refresh_from_db()
    assert dev.role == "member"


def test_console_members_last_admin_is_kept(world: dict[str, Any]) -> None:
    boss = _member(world, "a-boss")
    demote = world["client"].post(reverse("console:member_role", args=["a", boss.pk]),
                                  {f"role-{boss.pk}-role": "member"})
    assert demote.status_code == 400
    assert "at least one owner or admin" in demote.content.decode()
    remove = world["client"].post(reverse("console:member_remove", args=["a", boss.pk]))
    assert remove.status_code == 400
    boss.refresh_from_db()
    assert boss.role == "admin"


def test_console_members_remove_is_audited(world: dict[str, Any]) -> None:
    dev = _member(world, "a-dev")
    r = world["client"].post(reverse("console:member_remove", args=["a", dev.pk]))
    assert r.status_code == 302
    assert not Membership.objects.filter(pk=dev.pk).exists()
    assert AuditLog.objects.filter(action="membership.delete", tenant=world["tenant"]).exists()


def test_console_members_another_tenants_member_is_a_404(world: dict[str, Any]) -> None:
    other = make_tenant("b")
    stranger = add_member(other, "b-dev", Role.MEMBER)
    member = Membership.objects.get(user=stranger)
    r = world["client"].post(reverse("console:member_remove", args=["a", member.pk]))
    assert r.status_code == 404
    assert Membership.objects.filter(pk=member.pk).exists()


def test_console_members_withdraw_an_invitation(world: dict[str, Any]) -> None:
    world["client"].post(reverse("console:member_invite", args=["a"]),
                         {"invite-email": "x@example.com", "invite-role": "member"})
    invitation = Invitation.objects.get()
    r = world["client"].post(reverse("console:invitation_revoke", args=["a", invitation.pk]))
    assert r.status_code == 302
    invitation.refresh_from_db()
    assert invitation.revoked_at is not None


def test_console_members_tenant_admin_is_kept_out(world: dict[str, Any]) -> None:
    client = Client()
    client.force_login(world["boss"])
    dev = _member(world, "a-dev")
    r = client.post(reverse("console:member_remove", args=["a", dev.pk]))
    assert r.status_code == 403
    assert Membership.objects.filter(pk=dev.pk).exists()
