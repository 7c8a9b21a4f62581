"""Just-in-time accounts keyed on (issuer, ``sub``) — never on the e-mail — and the
memberships the operator's rules give (applied at every login, ADR 0222)."""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.text import slugify

from portal.core.services import audit_record
from portal.sso import rules
from portal.sso.models import ExternalIdentity, MappingRule
from portal.tenants import sourced
from portal.tenants.models import Membership, Tenant

if TYPE_CHECKING:
    from portal.sso.providers import Provider

LOG = logging.getLogger(__name__)


def _free_username(claims: dict[str, Any]) -> str:
    wanted = str(claims.get("preferred_username") or str(claims.get("email", "")).split("@")[0])
    base = (slugify(wanted) or "sso-user")[:120]
    users = get_user_model().objects
    name = base
    while users.filter(username=name).exists():
        name = f"{base}-{secrets.token_hex(3)}"
    return name


def _new_user(provider: Provider, claims: dict[str, Any]) -> Any:
    user = get_user_model().objects.create_user(
        username=_free_username(claims), email=str(claims.get("email", "")),
        first_name=str(claims.get("given_name", ""))[:150],
        last_name=str(claims.get("family_name", ""))[:150])
    user.set_unusable_password()
    user.save(update_fields=["password"])
    audit_record(actor=None, action="user.sso_create", obj=user,
                 changes={"issuer": provider.issuer, "subject": claims["sub"]})
    return user


@transaction.atomic
def sign_in(*, provider: Provider, claims: dict[str, Any]) -> Any:
    """The user behind a verified login (created on first sight); memberships follow the
    rules. Returns None for a deactivated account."""
    identity = (ExternalIdentity.objects.select_for_update().select_related("user")
                .filter(issuer=provider.issuer, subject=str(claims["sub"])).first())
    if identity is None:
        identity = ExternalIdentity(issuer=provider.issuer, subject=str(claims["sub"]),
                                    user=_new_user(provider, claims))
    identity.last_login_claims = claims
    identity.save()
    if not identity.user.is_active:
        return None
    apply_rules(user=identity.user, provider=provider, claims=claims)
    return identity.user


def apply_rules(*, user: Any, provider: Provider, claims: dict[str, Any]) -> None:
    """Grant what the rules give; remove the memberships this provider's rules granted
    that they no longer give (hand-made memberships are left alone)."""
    candidates = MappingRule.objects.filter(issuer__in=["", provider.issuer])
    wanted = rules.grants(candidates, claims)
    for tenant in Tenant.objects.filter(pk__in=wanted.keys()):
        sourced.sourced_grant(tenant=tenant, user=user, source=provider.source,
                              role=sourced.strongest(wanted[tenant.pk]))
    stale = Membership.objects.filter(user=user, source=provider.source).exclude(
        tenant_id__in=wanted.keys())
    for member in stale:
        if not sourced.sourced_remove(member=member, source=provider.source):
            LOG.warning("SSO kept %s: last owner/admin of %s", user, member.tenant.slug)
