"""Writes the tenant pages need that no other app offers yet: a user's SSH keys.

These belong in ``portal/tenants/services.py`` beside the model; they live here until
the tenants owner moves them (same signatures).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError, NotFound, PermissionDenied
from portal.core.services import audit_record
from portal.tenants.access import AnyUser
from portal.tenants.models import SshPublicKey
from portal.tenants.sshkeys import parse_public_key

MAX_KEYS_PER_USER = 50


@transaction.atomic
def ssh_key_add(*, actor: AnyUser, name: str, public_key: str) -> SshPublicKey:
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
    return key


@transaction.atomic
def ssh_key_delete(*, actor: AnyUser, key_id: str) -> None:
    key = SshPublicKey.objects.filter(pk=key_id, user_id=getattr(actor, "pk", None)).first()
    if key is None:
        raise NotFound(_("No such key."))
    audit_record(actor=actor, action="sshkey.delete", obj=key,
                 changes={"fingerprint": key.fingerprint})
    key.delete()
