"""Invitations: the only way into a tenant (writes; atomic, audited, keyword-only).

An admin invites an e-mail address with a role; the address gets a link with a one-time
token; whoever signs in with that address and opens the link may accept. The answer to the
admin is the same whether or not an account with that address exists (no enumeration), and
accepting never changes which tenant the new member acts for (``access.SESSION_KEY``).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError, Conflict, NotFound
from portal.core.services import audit_record
from portal.tenants import access as access_gate
from portal.tenants.access import ROLE_LABELS, AnyUser, require_role
from portal.tenants.models import Invitation, Membership, Role, Tenant
from portal.tenants.selectors import INVITATION_TOKEN_PREFIX, hash_token, invitation_by_token
from portal.tenants.services import check_can_grant, membership_grant

log = logging.getLogger(__name__)
TOKEN_PREFIX = INVITATION_TOKEN_PREFIX


def invitation_ttl() -> timedelta:
    return timedelta(days=int(getattr(settings, "GPUPOOL_INVITATION_DAYS", 7)))


@dataclass(frozen=True)
class IssuedInvitation:
    invitation: Invitation
    token: str  # e-mailed, never stored


def _accept_link(base_url: str, token: str) -> str:
    return base_url.rstrip("/") + reverse("web:invitation", kwargs={"token": token})


def _mail(invitation: Invitation, link: str) -> None:
    words = {"tenant": invitation.tenant.name, "link": link,
             "days": invitation_ttl().days}
    try:
        with translation.override(settings.LANGUAGE_CODE):
            words["role"] = str(ROLE_LABELS[Role(invitation.role)]).lower()
            subject = _("[gpupool] You are invited to %(tenant)s") % words
            body = "\n".join([
                _("You are invited to join the tenant %(tenant)s as %(role)s. Sign in with "
                  "this e-mail address and accept within %(days)s days: %(link)s") % words,
                _("If you did not expect this, ignore this message.")])
        send_mail(subject, body, None, [invitation.email], fail_silently=False)
    except Exception:
        log.exception("could not send an invitation mail")


def _refuse_members(tenant: Tenant, email: str) -> None:
    """Admins see their members' addresses anyway: saying "already a member" leaks nothing
    beyond the members list."""
    if Membership.objects.filter(tenant=tenant, user__email__iexact=email).exists():
        raise Conflict(_("Already a member."), fields={"email": [_("Already a member.")]})


@transaction.atomic
def invitation_create(*, actor: AnyUser, tenant: Tenant, email: str,
                      role: str = Role.MEMBER, base_url: str = "") -> IssuedInvitation:
    """Invite ``email``; an earlier open invitation to it is replaced (its link dies)."""
    check_can_grant(actor, tenant, role)
    email = email.strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise ApplicationError(_("Enter a valid email address."),
                               fields={"email": [_("Enter a valid email address.")]}) from None
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    _refuse_members(tenant, email)
    now = timezone.now()
    Invitation.objects.filter(tenant=tenant, email=email, accepted_at__isnull=True,
                              revoked_at__isnull=True).update(revoked_at=now)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        tenant=tenant, email=email, role=role, token_hash=hash_token(token),
        inviter=actor if actor.is_authenticated else None, expires_at=now + invitation_ttl())
    audit_record(actor=actor, action="invitation.create", obj=invitation, tenant=tenant,
                 changes={"email": email, "role": role})
    link = _accept_link(base_url, token)
    transaction.on_commit(lambda: _mail(invitation, link))
    return IssuedInvitation(invitation=invitation, token=token)


def _gone() -> NotFound:
    return NotFound(_("This invitation is not valid any more (accepted, withdrawn or "
                      "expired)."), fields={"token": [_("Invalid or expired invitation.")]})


@transaction.atomic
def invitation_accept(*, actor: AnyUser, token: str) -> Membership:
    """Join the tenant with the invited role. The actor's address must be the invited one.
    Which tenant the actor acts for is left as it was (the caller pins the session)."""
    found = invitation_by_token(token)
    if found is None or not actor.is_authenticated:
        raise _gone()
    invitation = Invitation.objects.select_for_update().get(pk=found.pk)
    if invitation.accepted_at is not None or invitation.revoked_at is not None:
        raise _gone()
    if (getattr(actor, "email", "") or "").strip().lower() != invitation.email:
        raise _gone()  # same answer: a leaked link tells its finder nothing
    tenant = Tenant.objects.select_for_update().get(pk=invitation.tenant_id)
    member = Membership.objects.filter(tenant=tenant, user=actor).first()
    if member is None:
        member = membership_grant(actor=actor, tenant=tenant, user=actor, role=invitation.role)
    invitation.accepted_at, invitation.accepted_by = timezone.now(), actor
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit_record(actor=actor, action="invitation.accept", obj=invitation, tenant=tenant,
                 changes={"role": invitation.role})
    return member


@transaction.atomic
def invitation_revoke(*, actor: AnyUser, invitation: Invitation) -> Invitation:
    require_role(actor, invitation.tenant, Role.ADMIN)
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    if invitation.accepted_at is None and invitation.revoked_at is None:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="invitation.revoke", obj=invitation,
                     tenant=invitation.tenant, changes={"email": invitation.email})
    return invitation


def accept_keeping_active_tenant(request: Any, token: str) -> Membership:
    """Accept, then pin the session to the tenant the user acted for before (if any), so
    joining never switches where their next order or API key goes."""
    before = access_gate.active_tenant(request)
    member = invitation_accept(actor=request.user, token=token)
    session = getattr(request, "session", None)
    if before is not None and session is not None:
        session[access_gate.SESSION_KEY] = before.slug
    return member
