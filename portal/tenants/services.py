"""Every write to tenants, memberships and API keys (audited, atomic)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError, Conflict, NotFound, PermissionDenied
from portal.core.services import audit_record, model_changes
from portal.tenants import hooks
from portal.tenants.access import AnyUser, is_staff, principal_of, require_role, role_in
from portal.tenants.models import ApiKey, Membership, Role, SshPublicKey, Tenant
from portal.tenants.sshkeys import parse_public_key

API_KEY_PREFIX = "gpk"


@transaction.atomic
def tenant_create(*, actor: AnyUser | None, name: str, slug: str = "",
                  contact_email: str = "", contact_name: str = "",
                  currency: str = "USD") -> Tenant:
    slug = slug or slugify(name)[:63]
    if not slug:
        raise ApplicationError(_("A slug is needed."),
                               fields={"slug": [_("This field is required.")]})
    if Tenant.objects.filter(slug=slug).exists():
        raise ApplicationError(_("Slug taken."),
                               fields={"slug": [_("A tenant with this slug exists.")]})
    tenant = Tenant.objects.create(name=name, slug=slug, contact_email=contact_email,
                                   contact_name=contact_name, currency=currency.upper())
    audit_record(actor=actor, action="tenant.create", obj=tenant,
                 changes={"name": name, "slug": slug})
    return tenant


TENANT_EDITABLE = ("name", "contact_email", "contact_name")


@transaction.atomic
def tenant_update(*, actor: AnyUser, tenant: Tenant, **values: Any) -> Tenant:
    require_role(actor, tenant, Role.ADMIN)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = {f: getattr(tenant, f) for f in TENANT_EDITABLE}
    for field, value in values.items():
        if field not in TENANT_EDITABLE:
            raise ApplicationError(_("Not editable."),
                                   fields={field: [_("This field is read-only.")]})
        setattr(tenant, field, value)
    tenant.full_clean()
    tenant.save()
    audit_record(actor=actor, action="tenant.update", obj=tenant,
                 changes=model_changes(tenant, list(TENANT_EDITABLE), before))
    return tenant


@transaction.atomic
def tenant_set_status(*, actor: AnyUser, tenant: Tenant, status: str, reason: str = "") -> Tenant:
    """Suspend or resume a tenant (staff only). A suspended tenant cannot order."""
    if not is_staff(actor):
        raise PermissionDenied(_("Only platform staff can suspend or resume tenants."))
    if status not in Tenant.Status.values:
        raise ApplicationError(_("Unknown status."), fields={"status": [_("Unknown status.")]})
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    old = tenant.status
    tenant.status = status
    tenant.save(update_fields=["status"])
    audit_record(actor=actor, action=f"tenant.{'suspend' if status == 'suspended' else 'resume'}",
                 obj=tenant, changes={"status": [old, status], "reason": reason})
    if old != status:  # a suspended tenant's leases keep no host logins
        hooks.access_changed_on_commit([tenant.pk])
    return tenant


def acts_as_owner(actor: AnyUser, tenant: Tenant) -> bool:
    """Owner powers in ``tenant``, decided on the principal as the gate decides
    (``access.require_role``): platform staff, or staff through a key bound to this tenant
    (staff in that tenant only, ADR 0101), or the tenant's owner — never through a key
    bound to another tenant."""
    p = principal_of(actor)
    if not p.allows(tenant):
        return False
    return p.staff_user or role_in(p, tenant) == Role.OWNER


def check_can_grant(actor: AnyUser, tenant: Tenant, role: str) -> None:
    require_role(actor, tenant, Role.ADMIN)
    if role not in Role.values:
        raise ApplicationError(_("Unknown role."), fields={
            "role": [_("Choose one of %(choices)s.") % {"choices": Role.values}]})
    if role == Role.OWNER and not acts_as_owner(actor, tenant):
        raise PermissionDenied(_("Only an owner can make owners."))


ADMIN_ROLES = (Role.OWNER, Role.ADMIN)


def _lock_tenant(tenant_id: Any) -> Tenant:
    """Serialise membership changes of one tenant (two admins demoting each other at once
    must not both pass the last-admin check)."""
    return Tenant.objects.select_for_update().get(pk=tenant_id)


def _locked_member(member: Membership) -> Membership:
    _lock_tenant(member.tenant_id)
    locked = (Membership.objects.select_for_update(of=("self",))
              .select_related("tenant", "user").filter(pk=member.pk).first())
    if locked is None:  # removed meanwhile (a concurrent request)
        raise NotFound(_("No such member."))
    return locked


def _owners_left_without(member: Membership) -> int:
    return (Membership.objects.filter(tenant=member.tenant, role=Role.OWNER)
            .exclude(pk=member.pk).count())


def _admins_left_without(member: Membership) -> int:
    return (Membership.objects.filter(tenant_id=member.tenant_id, role__in=ADMIN_ROLES,
                                      user__is_active=True)
            .exclude(pk=member.pk).count())


def last_admin_message() -> str:
    return _("A tenant keeps at least one owner or admin: make someone else an admin first.")


def _keep_an_admin(member: Membership, *, field: str) -> None:
    """Refuse to take away the tenant's last active owner/admin (removal, demotion,
    deactivation)."""
    if member.role in ADMIN_ROLES and _admins_left_without(member) == 0:
        raise ApplicationError(last_admin_message(), fields={field: [last_admin_message()]},
                               code="last_admin")


def last_admin_of(user: Any) -> list[Tenant]:
    """The tenants whose last active owner/admin ``user`` is (unlocked: a form's check;
    ``user_set_active`` re-checks under the tenant locks)."""
    return [m.tenant for m in Membership.objects.filter(user=user, role__in=ADMIN_ROLES)
            .select_related("tenant") if _admins_left_without(m) == 0]


def _keep_an_owner(actor: AnyUser, member: Membership, *, verb: str) -> None:
    if member.role != Role.OWNER:
        return
    if not acts_as_owner(actor, member.tenant):
        raise PermissionDenied(_("Only an owner can demote an owner.") if verb == "demote"
                               else _("Only an owner can remove an owner."))
    if _owners_left_without(member) == 0:
        raise ApplicationError(_("A tenant keeps at least one owner."),
                               fields={"role": [_("This is the last owner.")]},
                               code="last_owner")


def membership_grant(*, actor: AnyUser | None, tenant: Tenant, user: Any,
                     role: str) -> Membership:
    """Make ``user`` a member (inside the caller's transaction; the invitation flow and
    fixtures call it — nobody is added without accepting an invitation)."""
    try:
        with transaction.atomic():
            member = Membership.objects.create(tenant=tenant, user=user, role=role)
    except IntegrityError as exc:
        raise Conflict(_("Already a member."),
                       fields={"email": [_("Already a member.")]}) from exc
    audit_record(actor=actor, action="membership.create", obj=member, tenant=tenant,
                 changes={"user": user.get_username(), "role": role})
    hooks.access_changed_on_commit([tenant.pk])
    return member


@transaction.atomic
def membership_change_role(*, actor: AnyUser, member: Membership, role: str) -> Membership:
    member = _locked_member(member)  # then check: the actor's own role may just have changed
    check_role_change(actor, member, role)
    old = member.role
    member.role = role
    member.save(update_fields=["role"])
    audit_record(actor=actor, action="membership.update", obj=member, tenant=member.tenant,
                 changes={"role": [old, role]})
    if old != role:
        hooks.access_changed_on_commit([member.tenant_id])
    return member


MAX_MEMBER_GPUS = 100_000


@transaction.atomic
def membership_set_limit(*, actor: AnyUser, membership: Membership,
                         max_gpus: int | None) -> Membership:
    """Set (or clear, with None) a member's personal GPU limit inside their tenant.

    Owners and admins only. The limit is checked when that member orders
    (``portal.leasing.services.check_member_limit``); leases already placed are kept.
    """
    require_role(actor, membership.tenant, Role.ADMIN)
    if max_gpus is not None and (isinstance(max_gpus, bool) or not isinstance(max_gpus, int)
                                 or not 0 <= max_gpus <= MAX_MEMBER_GPUS):
        msg = _("A whole number of GPUs between 0 and %(max)s, or empty for no limit.") % {
            "max": MAX_MEMBER_GPUS}
        raise ApplicationError(msg, fields={"max_gpus": [msg]})
    member = Membership.objects.select_for_update().select_related("tenant", "user").get(
        pk=membership.pk)
    old = member.max_gpus
    member.max_gpus = max_gpus
    member.save(update_fields=["max_gpus"])
    audit_record(actor=actor, action="membership.limit", obj=member, tenant=member.tenant,
                 changes={"user": member.user.get_username(), "max_gpus": [old, max_gpus]})
    return member


def check_can_remove(actor: AnyUser, member: Membership) -> None:
    """The rules of removing ``member`` (admin role, owners, the last admin), unlocked:
    for a form's validation; ``membership_remove`` checks them again under the lock."""
    require_role(actor, member.tenant, Role.ADMIN)
    _keep_an_owner(actor, member, verb="remove")
    _keep_an_admin(member, field="member")


def check_role_change(actor: AnyUser, member: Membership, role: str) -> None:
    """The rules of giving ``member`` ``role`` (unlocked; see ``check_can_remove``)."""
    check_can_grant(actor, member.tenant, role)
    if member.role == Role.OWNER and role != Role.OWNER:
        _keep_an_owner(actor, member, verb="demote")
    if role not in ADMIN_ROLES:
        _keep_an_admin(member, field="role")


@transaction.atomic
def membership_remove(*, actor: AnyUser, member: Membership) -> None:
    """Remove a member; their keys for this tenant are revoked in the same transaction
    (a removed member's key answers 401, never acts for nobody), and their SSH keys leave
    the tenant's running leases once this commits."""
    member = _locked_member(member)
    check_can_remove(actor, member)
    audit_record(actor=actor, action="membership.delete", obj=member, tenant=member.tenant,
                 changes={"user": member.user.get_username(), "role": member.role})
    tenant_id = member.tenant_id
    _revoke_member_keys(actor, member)
    member.delete()
    hooks.access_changed_on_commit([tenant_id])


def _revoke_member_keys(actor: AnyUser, member: Membership) -> None:
    keys = ApiKey.objects.select_for_update().filter(user_id=member.user_id,
                                                     tenant_id=member.tenant_id,
                                                     revoked_at__isnull=True)
    now = timezone.now()
    for key in keys:
        key.revoked_at = now
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="apikey.revoke", obj=key, tenant=member.tenant,
                     changes={"reason": "membership removed"})


@transaction.atomic
def user_set_active(*, actor: AnyUser, user: Any, active: bool) -> Any:
    """Deactivate (or reactivate) a user account (staff only). A deactivated user signs
    in nowhere and loses host logins at once; refused while they are the last active
    owner/admin of a tenant."""
    if not is_staff(actor):
        raise PermissionDenied(_("Only platform staff can deactivate users."))
    user = type(user).objects.select_for_update().get(pk=user.pk)
    memberships = list(Membership.objects.filter(user=user).select_related("tenant"))
    if not active:
        for member in memberships:
            _lock_tenant(member.tenant_id)
            _keep_an_admin(member, field="is_active")
    if user.is_active != active:
        user.is_active = active
        user.save(update_fields=["is_active"])
        audit_record(actor=actor, action="user.activate" if active else "user.deactivate",
                     obj=user, changes={"is_active": active})
        hooks.access_changed_on_commit(m.tenant_id for m in memberships)
    return user


@dataclass(frozen=True)
class IssuedKey:
    key: ApiKey
    secret: str  # shown once, never stored


def hash_secret(secret: str) -> str:
    """Keys are 256-bit random secrets, so a plain SHA-256 is a sound at-rest hash."""
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def api_key_create(*, actor: AnyUser, name: str, tenant: Tenant | None,
                   expires_at: datetime | None = None) -> IssuedKey:
    if not actor.is_authenticated:
        raise PermissionDenied(_("Sign in first."))
    if tenant is not None:
        require_role(actor, tenant, Role.VIEWER)
    elif not is_staff(actor):
        raise ApplicationError(_("Pick a tenant."),
                               fields={"tenant": [_("This field is required.")]})
    if expires_at is not None and expires_at <= timezone.now():
        raise ApplicationError(_("Expiry in the past."),
                               fields={"expires_at": [_("Must be in the future.")]})
    prefix = secrets.token_hex(6)
    secret = f"{API_KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(user=actor, tenant=tenant, name=name, prefix=prefix,
                                secret_hash=hash_secret(secret), expires_at=expires_at)
    audit_record(actor=actor, action="apikey.create", obj=key, tenant=tenant,
                 changes={"name": name, "prefix": prefix})
    return IssuedKey(key=key, secret=secret)


@transaction.atomic
def api_key_revoke(*, actor: AnyUser, key: ApiKey) -> ApiKey:
    _check_can_revoke(actor, key)
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="apikey.revoke", obj=key, tenant=key.tenant)
    return key


def _check_can_revoke(actor: AnyUser, key: ApiKey) -> None:
    """Platform staff, the key's own user (through a key: only keys the credential may act
    for), or an admin of the key's tenant."""
    p = principal_of(actor)
    if p.platform_staff:
        return
    own = p.authenticated and key.user_id == getattr(p.user, "pk", None)
    if own and (p.allows(key.tenant_id) if key.tenant_id is not None else not p.via_key):
        return
    if key.tenant is None:
        raise NotFound(_("No such key."))
    require_role(p, key.tenant, Role.ADMIN)


def api_key_authenticate(raw: str) -> ApiKey | None:
    """The live key matching ``raw`` (constant-time compare), recording its last use."""
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX:
        return None
    member = Membership.objects.filter(user_id=OuterRef("user_id"),
                                       tenant_id=OuterRef("tenant_id"))
    key = (ApiKey.objects.select_related("user", "tenant").annotate(member=Exists(member))
           .filter(prefix=parts[1]).first())
    if key is None or not secrets.compare_digest(key.secret_hash, hash_secret(raw)):
        return None
    now = timezone.now()
    if key.revoked_at is not None or (key.expires_at is not None and key.expires_at <= now):
        return None
    if key.tenant_id is not None and not getattr(key, "member", False) and not key.user.is_staff:
        return None  # its user left the tenant (a key from before revocation on removal)
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key


def preference_set_language(*, user: AnyUser, language: str) -> None:
    """Remember the language a signed-in user picked (for e-mails); unknown codes ignored."""
    from django.conf import settings as dj_settings

    from portal.tenants.models import UserPreference

    if not user.is_authenticated or language not in dict(dj_settings.LANGUAGES):
        return
    UserPreference.objects.update_or_create(user=user, defaults={"language": language})


MAX_KEYS_PER_USER = 50


def _tenants_of(user: Any) -> list[Any]:
    return list(Membership.objects.filter(user=user).values_list("tenant_id", flat=True))


@transaction.atomic
def ssh_key_add(*, actor: AnyUser, name: str, public_key: str) -> SshPublicKey:
    """Add a key; it reaches the running leases of the actor's tenants on commit."""
    if not actor.is_authenticated:
        raise PermissionDenied(_("Sign in first."))
    name = name.strip()
    if not name:
        raise ApplicationError(_("Name needed."), fields={"name": [_("This field is required.")]})
    parsed = parse_public_key(public_key)
    if SshPublicKey.objects.filter(user=actor).count() >= MAX_KEYS_PER_USER:
        raise ApplicationError(_("Too many keys."), fields={
            "public_key": [_("At most %(max)s keys.") % {"max": MAX_KEYS_PER_USER}]})
    try:
        with transaction.atomic():
            key = SshPublicKey.objects.create(user=actor, name=name, key_type=parsed.key_type,
                                              public_key=parsed.line,
                                              fingerprint=parsed.fingerprint)
    except IntegrityError as exc:
        raise ApplicationError(_("Duplicate key."), fields={
            "public_key": [_("You have already added this key.")]}) from exc
    audit_record(actor=actor, action="sshkey.create", obj=key,
                 changes={"name": name, "fingerprint": parsed.fingerprint})
    hooks.access_changed_on_commit(_tenants_of(actor))
    return key


@transaction.atomic
def ssh_key_delete(*, actor: AnyUser, key_id: str) -> None:
    """Delete one of the actor's keys; it leaves every running lease on commit."""
    key = SshPublicKey.objects.filter(pk=key_id, user_id=getattr(actor, "pk", None)).first()
    if key is None:
        raise NotFound(_("No such key."))
    audit_record(actor=actor, action="sshkey.delete", obj=key,
                 changes={"fingerprint": key.fingerprint})
    key.delete()
    hooks.access_changed_on_commit(_tenants_of(actor))
