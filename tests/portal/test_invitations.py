"""Finding 8: membership needs consent (invitations), adding someone does not enumerate
accounts, joining never switches the tenant one acts for, and a tenant keeps an admin."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from portal.core.errors import ApplicationError, NotFound
from portal.tenants import access, invitations
from portal.tenants import services as tenant_services
from portal.tenants.models import Invitation, Membership, Role
from tests.portal.factories import add_member, client_for, make_tenant, make_user

TOKEN = re.compile(r"/invitations/(gpi_[A-Za-z0-9_-]+)/")


@pytest.fixture(autouse=True)
def _no_axes_between_tests(settings: Any) -> None:
    settings.AXES_ENABLED = False


@pytest.fixture
def world(db: Any) -> dict[str, Any]:
    """Tenant acme (olga owner, adam admin, vic viewer); carol is in tenant zulu only
    (she acts for zulu; acme sorts first, the gate's default when no tenant is chosen)."""
    acme, zulu = make_tenant("acme"), make_tenant("zulu")
    w = {"acme": acme, "zulu": zulu, "olga": add_member(acme, "olga", Role.OWNER),
         "adam": add_member(acme, "adam", Role.ADMIN), "vic": add_member(acme, "vic", Role.VIEWER),
         "staff": make_user("root", staff=True)}
    w["carol"] = add_member(zulu, "carol", Role.MEMBER)
    return w


def invite_api(w: dict[str, Any], email: str, role: str = "member") -> Any:
    return client_for(w["adam"]).post("/api/v1/tenants/acme/invitations",
                                      {"email": email, "role": role}, format="json")


def token_from_mail(to: str) -> str:
    sent = [m for m in mail.outbox if to in m.to]
    assert sent, f"no mail to {to}"
    found = TOKEN.search(sent[-1].body)
    assert found, sent[-1].body
    return found.group(1)


# --- consent and enumeration --------------------------------------------------------

def test_adding_a_member_creates_an_invitation_not_a_membership(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = invite_api(world, "carol@example.com")
    assert response.status_code == 202, response.content
    assert not Membership.objects.filter(tenant=world["acme"], user=world["carol"]).exists()
    assert Invitation.objects.filter(tenant=world["acme"], email="carol@example.com").exists()
    assert token_from_mail("carol@example.com").startswith("gpi_")


def _shape(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("id", "email", "created", "expires_at")}


def test_invite_answer_is_identical_for_unknown_addresses(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    """No "No such user": an address without an account gets the same 202 and a mail."""
    with django_capture_on_commit_callbacks(execute=True):
        known = invite_api(world, "carol@example.com")
        unknown = invite_api(world, "nobody@example.com")
    assert known.status_code == unknown.status_code == 202
    assert _shape(known.json()) == _shape(unknown.json())
    assert sorted(known.json()) == sorted(unknown.json())
    assert {m.to[0] for m in mail.outbox} == {"carol@example.com", "nobody@example.com"}


def test_invite_page_answer_is_identical_for_unknown_addresses(world: dict[str, Any]) -> None:
    adam = Client()
    adam.force_login(world["adam"])
    pages = [adam.post(reverse("web:members"), {"email": e, "role": "member"}, follow=True)
             for e in ("carol@example.com", "nobody@example.com")]
    texts = [p.content.decode().replace(e, "X") for p, e in
             zip(pages, ("carol@example.com", "nobody@example.com"), strict=True)]
    assert all(p.status_code == 200 for p in pages)
    assert "No user with this value" not in texts[0] + texts[1]
    assert "An invitation was sent to X." in texts[0] and "An invitation was sent to X." in texts[1]


def test_accepting_never_changes_the_active_tenant(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        invite_api(world, "carol@example.com", role="member")
    token = token_from_mail("carol@example.com")
    carol = Client()
    carol.force_login(world["carol"])
    # she has never used the switcher: she acts for zulu only by default
    assert carol.get(reverse("web:invitation", kwargs={"token": token})).status_code == 200
    response = carol.post(reverse("web:invitation", kwargs={"token": token}))
    assert response.status_code == 302
    assert Membership.objects.get(tenant=world["acme"], user=world["carol"]).role == "member"
    me = carol.get("/api/v1/me").json()
    assert me["active_tenant"] == "zulu"
    key = carol.post("/api/v1/api-keys", {"name": "ci"}, content_type="application/json")
    assert key.status_code == 201 and key.json()["tenant"] == "zulu"


def test_accept_over_the_api_keeps_the_active_tenant(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        invite_api(world, "carol@example.com", role="viewer")
    carol = Client()
    carol.force_login(world["carol"])
    response = carol.post("/api/v1/invitations/accept",
                          {"token": token_from_mail("carol@example.com")},
                          content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json() == {"tenant": "acme", "role": "viewer", "active_tenant": "zulu"}


def test_invitation_for_another_address_cannot_be_accepted(
        world: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        invite_api(world, "someone@example.com")
    token = token_from_mail("someone@example.com")
    with pytest.raises(NotFound):
        invitations.invitation_accept(actor=world["carol"], token=token)
    assert not Membership.objects.filter(tenant=world["acme"], user=world["carol"]).exists()


@pytest.mark.parametrize("spoil", ["expired", "revoked", "accepted", "garbage"])
def test_spent_or_bogus_invitation_is_refused(world: dict[str, Any], spoil: str) -> None:
    issued = invitations.invitation_create(actor=world["adam"], tenant=world["acme"],
                                           email="carol@example.com")
    token = issued.token
    inv = Invitation.objects.filter(pk=issued.invitation.pk)
    if spoil == "expired":
        inv.update(expires_at=timezone.now() - timedelta(seconds=1))
    elif spoil == "revoked":
        invitations.invitation_revoke(actor=world["adam"], invitation=issued.invitation)
    elif spoil == "accepted":
        invitations.invitation_accept(actor=world["carol"], token=token)
    else:
        token = "gpi_" + "x" * 43
    response = Client()
    response.force_login(world["carol"])
    answer = response.post("/api/v1/invitations/accept", {"token": token},
                           content_type="application/json")
    assert answer.status_code == 404
    assert "token" in answer.json()["fields"]


def test_invitation_bad_input_is_a_400_naming_the_field(world: dict[str, Any]) -> None:
    for body, field in [({"email": "not-an-email"}, "email"), ({}, "email"),
                        ({"email": "x@example.com", "role": "emperor"}, "role")]:
        response = client_for(world["adam"]).post("/api/v1/tenants/acme/invitations", body,
                                                  format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["fields"]
    assert not Invitation.objects.exists()


def test_only_admins_invite_and_see_invitations(world: dict[str, Any]) -> None:
    vic = client_for(world["vic"])
    assert vic.post("/api/v1/tenants/acme/invitations", {"email": "x@example.com"},
                    format="json").status_code == 403
    assert vic.get("/api/v1/tenants/acme/invitations").status_code == 403
    assert client_for(world["carol"]).get("/api/v1/tenants/acme/invitations").status_code == 404
    assert not Invitation.objects.exists()


def test_only_owners_invite_owners(world: dict[str, Any]) -> None:
    assert invite_api(world, "x@example.com", role="owner").status_code == 403


def test_reinvite_replaces_the_open_invitation(world: dict[str, Any]) -> None:
    first = invitations.invitation_create(actor=world["adam"], tenant=world["acme"],
                                          email="Carol@Example.com")
    invitations.invitation_create(actor=world["adam"], tenant=world["acme"],
                                  email="carol@example.com", role=Role.VIEWER)
    assert Invitation.objects.filter(revoked_at__isnull=True).count() == 1
    with pytest.raises(NotFound):
        invitations.invitation_accept(actor=world["carol"], token=first.token)


def test_members_page_lists_and_withdraws_invitations(world: dict[str, Any]) -> None:
    issued = invitations.invitation_create(actor=world["adam"], tenant=world["acme"],
                                           email="pending@example.com")
    adam = Client()
    adam.force_login(world["adam"])
    assert "pending@example.com" in adam.get(reverse("web:members")).content.decode()
    url = reverse("web:invitation_revoke", kwargs={"invitation_id": issued.invitation.pk})
    assert adam.post(url).status_code == 302
    assert Invitation.objects.get().revoked_at is not None


# --- the last admin -----------------------------------------------------------------

@pytest.fixture
def admins_only(db: Any) -> dict[str, Any]:
    """Tenant t with one admin (ada) and a member (max), no owner: what staff create."""
    t = make_tenant("t")
    return {"t": t, "ada": add_member(t, "ada", Role.ADMIN), "max": add_member(t, "max", "member"),
            "staff": make_user("root", staff=True)}


def _m(w: dict[str, Any], name: str) -> Membership:
    return Membership.objects.get(tenant=w["t"], user=w[name])


def test_last_admin_cannot_remove_themselves(admins_only: dict[str, Any]) -> None:
    with pytest.raises(ApplicationError) as exc:
        tenant_services.membership_remove(actor=admins_only["ada"], member=_m(admins_only, "ada"))
    assert exc.value.code == "last_admin"
    assert Membership.objects.filter(pk=_m(admins_only, "ada").pk).exists()


def test_last_admin_cannot_demote_themselves(admins_only: dict[str, Any]) -> None:
    with pytest.raises(ApplicationError) as exc:
        tenant_services.membership_change_role(actor=admins_only["ada"],
                                               member=_m(admins_only, "ada"), role=Role.MEMBER)
    assert exc.value.code == "last_admin"
    assert _m(admins_only, "ada").role == Role.ADMIN


def test_last_admin_cannot_be_deactivated(admins_only: dict[str, Any]) -> None:
    with pytest.raises(ApplicationError) as exc:
        tenant_services.user_set_active(actor=admins_only["staff"], user=admins_only["ada"],
                                        active=False)
    assert "is_active" in exc.value.fields
    admins_only["ada"].refresh_from_db()
    assert admins_only["ada"].is_active


def test_admin_may_leave_when_another_admin_stays(admins_only: dict[str, Any]) -> None:
    tenant_services.membership_change_role(actor=admins_only["ada"],
                                           member=_m(admins_only, "max"), role=Role.ADMIN)
    tenant_services.membership_remove(actor=admins_only["ada"], member=_m(admins_only, "ada"))
    assert not Membership.objects.filter(tenant=admins_only["t"], user=admins_only["ada"]).exists()


def test_deactivated_admin_does_not_count_as_the_remaining_admin(
        admins_only: dict[str, Any]) -> None:
    other = add_member(admins_only["t"], "gone", Role.ADMIN)
    other.is_active = False
    other.save(update_fields=["is_active"])
    with pytest.raises(ApplicationError):
        tenant_services.membership_remove(actor=admins_only["ada"], member=_m(admins_only, "ada"))


def test_last_admin_refusal_over_api_is_a_400_naming_the_field(
        admins_only: dict[str, Any]) -> None:
    ada = client_for(admins_only["ada"])
    url = f"/api/v1/tenants/t/memberships/{_m(admins_only, 'ada').pk}"
    demote = ada.patch(url, {"role": "viewer"}, format="json")
    assert demote.status_code == 400 and "role" in demote.json()["fields"]
    remove = ada.delete(url)
    assert remove.status_code == 400 and "member" in remove.json()["fields"]
    assert "owner or admin" in remove.json()["detail"]
    assert _m(admins_only, "ada").role == Role.ADMIN


def test_last_admin_refusal_on_the_page_is_shown(admins_only: dict[str, Any]) -> None:
    ada = Client()
    ada.force_login(admins_only["ada"])
    member = _m(admins_only, "ada")
    page = ada.post(reverse("web:member_remove", kwargs={"member_id": member.pk}), follow=True)
    assert "at least one owner or admin" in page.content.decode()
    assert Membership.objects.filter(pk=member.pk).exists()


def test_last_admin_message_is_translated(admins_only: dict[str, Any]) -> None:
    from django.utils import translation

    with translation.override("zh-hans"):
        message = tenant_services.last_admin_message()
    assert message != "A tenant keeps at least one owner or admin: make someone else an " \
                      "admin first."


@pytest.mark.services("postgres")
@pytest.mark.django_db(transaction=True)
def test_two_admins_demoting_each_other_at_once_leave_one_admin(monkeypatch: Any) -> None:
    import time

    from django.db import connection

    from tests.portal.driving import in_threads

    count = tenant_services._admins_left_without

    def slow_count(member: Membership) -> int:  # widen the check-then-write window
        time.sleep(0.3)
        return count(member)

    monkeypatch.setattr(tenant_services, "_admins_left_without", slow_count)
    t = make_tenant("race")
    ada, bea = add_member(t, "ada", Role.ADMIN), add_member(t, "bea", Role.ADMIN)
    pairs = [(ada, bea), (bea, ada)]

    def demote(i: int) -> str:
        actor, target = pairs[i]
        try:
            tenant_services.membership_change_role(
                actor=actor, member=Membership.objects.get(tenant=t, user=target),
                role=Role.MEMBER)
        except ApplicationError as exc:
            return exc.code
        finally:
            connection.close()
        return "ok"

    results = in_threads(2, demote)
    # the tenant lock makes the later one see the first's commit: either no other admin is
    # left, or its actor is no admin any more (the role is checked under the lock)
    assert results.count("ok") == 1, results
    assert set(results) - {"ok"} <= {"last_admin", "permission_denied"}, results
    assert Membership.objects.filter(tenant=t, role=Role.ADMIN).count() == 1


def test_access_gate_default_tenant_is_unchanged_by_invitations(world: dict[str, Any]) -> None:
    """An open invitation is not a membership: the gate does not see the tenant."""
    invitations.invitation_create(actor=world["adam"], tenant=world["acme"],
                                  email="carol@example.com")
    assert list(access.tenants_for(world["carol"]).values_list("slug", flat=True)) == ["zulu"]


def test_removing_a_member_removed_meanwhile_is_a_404(admins_only: dict[str, Any]) -> None:
    stale = _m(admins_only, "max")
    Membership.objects.filter(pk=stale.pk).delete()
    with pytest.raises(NotFound):
        tenant_services.membership_remove(actor=admins_only["ada"], member=stale)
