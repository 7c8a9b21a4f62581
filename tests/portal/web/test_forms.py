"""Every form: bad input gets field messages and a 400, never a 500; good input works."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from portal.core import clock
from portal.leasing.models import Lease
from portal.tenants.models import ApiKey, Membership, SshPublicKey
from tests.portal.factories import make_user
from tests.portal.web.conftest import active_lease, client_for, ed25519_line, order, order_form


def errors_of(response: Any) -> str:
    return response.content.decode()


# --- order ------------------------------------------------------------------------------

def test_order_form_has_a_fresh_idempotency_key_per_render(alice: Client) -> None:
    a = alice.get(reverse("web:order")).context["form"].initial["idempotency_key"]
    b = alice.get(reverse("web:order")).context["form"].initial["idempotency_key"]
    assert a and b and a != b


def test_order_creates_one_lease_even_when_submitted_twice(pool: dict[str, Any],
                                                          alice: Client) -> None:
    data = order_form()
    first = alice.post(reverse("web:order"), data)
    second = alice.post(reverse("web:order"), data)
    assert first.status_code == 302 and second.status_code == 302
    assert first["Location"] == second["Location"]
    assert Lease.objects.filter(tenant=pool["a"]).count() == 1
    lease = Lease.objects.get(tenant=pool["a"])
    assert first["Location"] == reverse("web:lease", kwargs={"lease_id": lease.pk})
    assert lease.gpu_count == 8 and lease.name == "train"


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"models": []}, "models", "This field is required."),
    ({"models": ["B300"]}, "models", "Select a valid choice."),
    ({"gpu_count": "0"}, "gpu_count", "greater than or equal to 1"),
    ({"gpu_count": "eight"}, "gpu_count", "Enter a whole number."),
    ({"nodes": "-1"}, "nodes", "greater than or equal to 1"),
    ({"duration_hours": "0"}, "duration_hours", "greater than or equal to 0.25"),
    ({"start": "later", "start_at": ""}, "start_at", "Give a start time"),
    ({"start": "later", "start_at": "yesterday"}, "start_at", "Enter a valid date/time."),
    ({"gpu_milli": "500"}, "gpu_milli", "one GPU on one node"),
    ({"gpu_milli": "333"}, "gpu_milli", "Select a valid choice."),
    ({"locality": "moon"}, "locality", "Select a valid choice."),
    ({"priority": "vip"}, "priority", "Select a valid choice."),
    ({"idempotency_key": ""}, "idempotency_key", "This field is required."),
])
def test_order_rejects_bad_input_with_field_messages(alice: Client, overrides: dict[str, Any],
                                                     field: str, message: str) -> None:
    response = alice.post(reverse("web:order"), order_form(**overrides))
    assert response.status_code == 400
    assert message in response.context["form"].errors[field][0]
    assert message.split("“")[0] in errors_of(response)
    assert not Lease.objects.exists()


def test_order_beyond_quota_gets_the_services_message(alice: Client) -> None:
    response = alice.post(reverse("web:order"), order_form(nodes="3"))
    assert response.status_code == 400
    assert response.context["form"].errors
    assert "quota" in errors_of(response).lower()
    # Issue 12 (ADR 0132): the refused order is kept, REJECTED with the services' reason.
    rejected = Lease.objects.get()
    assert rejected.state == "rejected" and "quota" in rejected.state_reason.lower()


def test_order_too_long_is_refused(alice: Client) -> None:
    response = alice.post(reverse("web:order"), order_form(duration_hours="100"))
    assert response.status_code == 400
    assert list(Lease.objects.values_list("state", flat=True)) == ["rejected"]  # ADR 0132


def test_preview_shows_price_and_fit(alice: Client) -> None:
    response = alice.post(reverse("web:order_preview"), order_form(), HTTP_HX_REQUEST="true")
    body = errors_of(response)
    assert response.status_code == 200
    assert 'data-testid="quote"' in body and "Fits your quota" in body and "Can start now" in body
    assert "<html" not in body  # a fragment for htmx


def test_preview_of_bad_input_lists_the_problems(alice: Client) -> None:
    response = alice.post(reverse("web:order_preview"), order_form(gpu_count="0"))
    assert response.status_code == 400  # htmx swaps it (htmx-config in base.html)
    assert "Fix the highlighted fields" in errors_of(response)


def test_preview_beyond_quota_says_so_and_offers_alternatives(pool: dict[str, Any],
                                                              alice: Client) -> None:
    response = alice.post(reverse("web:order_preview"), order_form(nodes="3"))
    body = errors_of(response)
    assert "Exceeds your quota" in body or "quota" in body.lower()


def test_preview_without_javascript(alice: Client) -> None:
    response = alice.post(reverse("web:order"), {**order_form(), "preview": "1"})
    assert response.status_code == 200
    assert 'data-testid="quote"' in errors_of(response)
    assert not Lease.objects.exists()


# --- lease actions ------------------------------------------------------------------------

def test_extend_rejects_bad_input_and_accepts_good(pool: dict[str, Any], alice: Client) -> None:
    lease = active_lease(pool)
    url = reverse("web:lease_extend", kwargs={"lease_id": lease.pk})
    assert alice.get(url).status_code == 200
    response = alice.post(url, {"end_at": ""})
    assert response.status_code == 400 and "This field is required." in errors_of(response)
    response = alice.post(url, {"end_at": "not a date"})
    assert response.status_code == 400 and "Enter a valid date/time." in errors_of(response)
    earlier = (lease.end_at - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    response = alice.post(url, {"end_at": earlier})
    assert response.status_code == 400 and response.context["form"].errors
    new_end = lease.end_at + timedelta(hours=2)
    response = alice.post(url, {"end_at": new_end.strftime("%Y-%m-%dT%H:%M")})
    assert response.status_code == 302
    lease.refresh_from_db()
    assert lease.end_at == new_end


def test_release_needs_confirmation(pool: dict[str, Any], alice: Client) -> None:
    lease = active_lease(pool)
    url = reverse("web:lease_release", kwargs={"lease_id": lease.pk})
    response = alice.post(url, {"reason": "done"})
    assert response.status_code == 400 and "This field is required." in errors_of(response)
    lease.refresh_from_db()
    assert lease.state == "active"
    response = alice.post(url, {"reason": "done", "confirm": "on"})
    assert response.status_code == 302
    lease.refresh_from_db()
    assert lease.state == "releasing"


def test_cancel_a_queued_order(pool: dict[str, Any], alice: Client) -> None:
    lease = order(pool, start_at=clock.now() + timedelta(days=1))
    url = reverse("web:lease_cancel", kwargs={"lease_id": lease.pk})
    assert alice.post(url, {"reason": "x" * 400, "confirm": "on"}).status_code == 400
    assert alice.post(url, {"confirm": "on"}).status_code == 302
    lease.refresh_from_db()
    assert lease.state == "cancelled"
    # cancelling again: the service says no, shown on the form, not a 500
    response = alice.post(url, {"confirm": "on"})
    assert response.status_code == 400


# --- lease list filters ---------------------------------------------------------------

def test_lease_filters(pool: dict[str, Any], alice: Client) -> None:
    active = active_lease(pool, name="running")
    order(pool, name="tomorrow", start_at=clock.now() + timedelta(days=1), gpu_count=4)
    body = errors_of(alice.get(reverse("web:leases"), {"state": "active"}))
    assert "running" in body and "tomorrow" not in body
    body = errors_of(alice.get(reverse("web:leases"), {"state": "live", "model": "H100"}))
    assert "running" in body and "tomorrow" in body
    day = (clock.now() + timedelta(days=1)).date().isoformat()
    body = errors_of(alice.get(reverse("web:leases"), {"since": day}))
    assert "tomorrow" in body and "running" not in body
    assert str(active.pk)[:8] in errors_of(alice.get(reverse("web:calendar")))


@pytest.mark.parametrize(("params", "message"), [
    ({"state": "sleeping"}, "Select a valid choice."),
    ({"since": "2026-13-45"}, "Enter a valid date."),
    ({"since": "2026-11-05", "until": "2026-11-01"}, "The end date is before the start date."),
])
def test_lease_filters_reject_bad_input(alice: Client, params: dict[str, str],
                                        message: str) -> None:
    response = alice.get(reverse("web:leases"), params)
    assert response.status_code == 400
    assert message in errors_of(response)


def test_calendar_ignores_junk_offsets(alice: Client) -> None:
    assert alice.get(reverse("web:calendar"), {"weeks": "x"}).status_code == 200
    assert alice.get(reverse("web:calendar"), {"weeks": "-2"}).status_code == 200


# --- profile: SSH keys ----------------------------------------------------------------

def test_ssh_key_added_with_fingerprint(pool: dict[str, Any], alice: Client) -> None:
    response = alice.post(reverse("web:profile"), {"name": "laptop",
                                                   "public_key": ed25519_line()}, follow=True)
    key = SshPublicKey.objects.get(user=pool["alice"])
    assert key.fingerprint.startswith("SHA256:")
    assert key.fingerprint in errors_of(response)


@pytest.mark.parametrize(("key", "message"), [
    ("", "This field is required."),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "Unsupported key type"),
    ("ssh-ed25519 not*base64", "not valid base64"),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==", "truncated"),
    ("ssh-ed25519", "Expected"),
])
def test_ssh_key_rejects_bad_keys(alice: Client, key: str, message: str) -> None:
    response = alice.post(reverse("web:profile"), {"name": "k", "public_key": key})
    assert response.status_code == 400
    assert message in errors_of(response)
    assert not SshPublicKey.objects.exists()


def test_ssh_key_duplicate_and_foreign_delete(pool: dict[str, Any], alice: Client) -> None:
    alice.post(reverse("web:profile"), {"name": "a", "public_key": ed25519_line()})
    response = alice.post(reverse("web:profile"), {"name": "b", "public_key": ed25519_line()})
    assert response.status_code == 400 and "already added" in errors_of(response)
    key = SshPublicKey.objects.get()
    bob = client_for(pool["bob"])
    assert bob.post(reverse("web:ssh_key_delete", kwargs={"key_id": key.pk})).status_code == 404
    assert alice.get(reverse("web:ssh_key_delete", kwargs={"key_id": key.pk})).status_code == 405
    assert alice.post(reverse("web:ssh_key_delete", kwargs={"key_id": key.pk})).status_code == 302
    assert not SshPublicKey.objects.exists()


# --- tenant admin -----------------------------------------------------------------------

def test_admin_invites_changes_and_removes_members(pool: dict[str, Any]) -> None:
    """Adding is an invitation the person accepts (finding 8); then role and removal."""
    from portal.tenants.invitations import invitation_accept
    from portal.tenants.models import Invitation
    from portal.tenants.selectors import hash_token

    adam = client_for(pool["adam"])
    carol = make_user("carol")
    response = adam.post(reverse("web:members"), {"email": "carol@example.com", "role": "viewer"})
    assert response.status_code == 302
    assert not Membership.objects.filter(user=carol, tenant=pool["a"]).exists()
    invitation = Invitation.objects.get(email="carol@example.com")
    token = "gpi_test-token"
    Invitation.objects.filter(pk=invitation.pk).update(token_hash=hash_token(token))
    invitation_accept(actor=carol, token=token)
    member = Membership.objects.get(user=carol, tenant=pool["a"])
    assert member.role == "viewer"
    url = reverse("web:member_role", kwargs={"member_id": member.pk})
    adam.post(url, {f"{member.pk}-role": "member"})
    member.refresh_from_db()
    assert member.role == "member"
    adam.post(reverse("web:member_remove", kwargs={"member_id": member.pk}))
    assert not Membership.objects.filter(pk=member.pk).exists()


@pytest.mark.parametrize(("data", "message"), [
    ({"email": "", "role": "member"}, "This field is required."),
    ({"email": "not-an-email", "role": "member"}, "Enter a valid email address."),
    ({"email": "bob@example.com", "role": "emperor"}, "Select a valid choice."),
])
def test_member_invite_rejects_bad_input(pool: dict[str, Any], data: dict[str, str],
                                         message: str) -> None:
    response = client_for(pool["adam"]).post(reverse("web:members"), data)
    assert response.status_code == 400
    assert message in errors_of(response)


def test_member_admin_needs_admin_and_own_tenant(pool: dict[str, Any]) -> None:
    alice = client_for(pool["alice"])
    bob_membership = Membership.objects.get(user=pool["bob"])
    adam_membership = Membership.objects.get(user=pool["adam"])
    assert alice.post(reverse("web:members"),
                      {"email": "bob@example.com", "role": "member"}).status_code == 403
    assert alice.post(reverse("web:member_remove",
                              kwargs={"member_id": adam_membership.pk})).status_code == 403
    adam = client_for(pool["adam"])
    assert adam.post(reverse("web:member_remove",
                             kwargs={"member_id": bob_membership.pk})).status_code == 404
    response = adam.post(reverse("web:member_role", kwargs={"member_id": adam_membership.pk}),
                         {f"{adam_membership.pk}-role": "owner"}, follow=True)
    assert response.status_code == 403 or "owner" in errors_of(response).lower()


def test_api_key_shown_once_then_revoked(pool: dict[str, Any], alice: Client) -> None:
    response = alice.post(reverse("web:api_keys"), {"name": "ci"})
    assert response.status_code == 200
    secret = response.context["issued"].secret
    assert secret in errors_of(response)
    assert "no-cache" in response["Cache-Control"] or "no-store" in response["Cache-Control"]
    assert secret not in errors_of(alice.get(reverse("web:api_keys")))
    key = ApiKey.objects.get(user=pool["alice"])
    assert key.tenant == pool["a"]
    bob = client_for(pool["bob"])
    assert bob.post(reverse("web:api_key_revoke", kwargs={"key_id": key.pk})).status_code == 404
    alice.post(reverse("web:api_key_revoke", kwargs={"key_id": key.pk}))
    key.refresh_from_db()
    assert key.revoked_at is not None


@pytest.mark.parametrize(("data", "message"), [
    ({"name": ""}, "This field is required."),
    ({"name": "x" * 101}, "at most 100 characters"),
    ({"name": "ok", "expires_at": "soon"}, "Enter a valid date/time."),
    ({"name": "ok", "expires_at": "2001-01-01T00:00"}, "Must be in the future."),
])
def test_api_key_rejects_bad_input(alice: Client, data: dict[str, str], message: str) -> None:
    response = alice.post(reverse("web:api_keys"), data)
    assert response.status_code == 400
    assert message in errors_of(response)
    assert not ApiKey.objects.exists()


def test_tenant_switch_rejects_bad_input(alice: Client) -> None:
    response = alice.post(reverse("web:tenant_switch"), {"tenant": "not a slug!"})
    assert response.status_code == 302
    assert "active_tenant" not in alice.session


def test_refused_extension_offers_the_calendars_longest_end(pool: dict[str, Any], alice: Client,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from portal.leasing import services

    lease = active_lease(pool)
    longest = lease.end_at + timedelta(hours=1, minutes=30)

    def refuse(**kwargs: Any) -> Any:
        raise services.ExtensionRefused("The GPUs are booked after that.", longest)

    monkeypatch.setattr(services, "lease_extend", refuse)
    url = reverse("web:lease_extend", kwargs={"lease_id": lease.pk})
    response = alice.post(url, {"end_at": (lease.end_at + timedelta(hours=9)).strftime(
        "%Y-%m-%dT%H:%M")})
    body = errors_of(response)
    assert response.status_code == 400
    assert "The GPUs are booked after that." in body
    assert response.context["longest"] == longest
    assert f'value="{longest:%Y-%m-%dT%H:%M}"' in body  # one click to take the calendar's answer
