"""Lease events to people: the tenant's WebSocket group and email (after commit)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext as _

from portal.leasing import hooks, states
from portal.leasing.models import Lease
from portal.tenants.models import Membership, Role

log = logging.getLogger(__name__)


def tenant_group(tenant_id: Any) -> str:
    return f"tenant-{tenant_id}"


def _payload(lease: Lease) -> dict[str, Any]:
    return {"type": "lease.event", "lease_id": str(lease.pk), "state": lease.state,
            "event": {"state": lease.state, "reason": lease.state_reason,
                      "end_at": lease.end_at.isoformat(),
                      "wait_reason": lease.wait_reason}}


def _broadcast(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a lost channel layer must never break a lease transition
        log.exception("could not broadcast lease event")


def _recipients(lease: Lease) -> dict[str, list[str]]:
    """E-mail addresses by the language each person picked in the portal ("" = default)."""
    rows = list(Membership.objects.filter(tenant=lease.tenant, role__in=[
        Role.OWNER, Role.ADMIN]).values_list("user__email", "user__preference__language"))
    if lease.created_by_id is not None:
        rows += list(get_user_model().objects.filter(pk=lease.created_by_id)
                     .values_list("email", "preference__language"))
    by_language: dict[str, set[str]] = {}
    for email, language in rows:
        if email:
            by_language.setdefault(language or "", set()).add(email)
    seen: set[str] = set()
    out: dict[str, list[str]] = {}
    for language in sorted(by_language, key=lambda x: (x == "", x)):  # chosen ones first
        emails = sorted(by_language[language] - seen)
        seen |= set(emails)
        if emails:
            out[language] = emails
    return out


Compose = Callable[[], tuple[str, str]]


def _mail(lease: Lease, compose: Compose) -> None:
    """One message per language, each written in it (``compose`` runs under that language)."""
    for language, to in _recipients(lease).items():
        try:
            with translation.override(language or settings.LANGUAGE_CODE):
                subject, body = compose()
            send_mail(subject, body, None, to, fail_silently=False)
        except Exception:
            log.exception("could not send lease mail")


# The states that are mailed, as words in a sentence (``states.WORDS``: "… is now active").
EMAIL_STATES = states.MAILED
STATE_WORDS = states.WORDS


def _announce(lease: Lease, event: str, data: dict[str, Any] | None = None) -> None:
    hooks.announce_on_commit(event=event, tenant_id=lease.tenant_id, lease_id=lease.pk,
                             state=lease.state, reason=lease.state_reason, data=data)


def lease_changed(lease: Lease) -> None:
    group, message = tenant_group(lease.tenant_id), _payload(lease)
    state = lease.state
    _announce(lease, f"lease.{state}")
    transaction.on_commit(lambda: _broadcast(group, message))
    if state in EMAIL_STATES:
        name, pk, reason = str(lease), lease.pk, lease.state_reason

        def compose() -> tuple[str, str]:
            words = {"lease": name, "id": pk, "state": STATE_WORDS[state]}
            subject = _("[gpupool] %(lease)s is %(state)s") % words
            # Fixed reasons are msgids of the catalogue (portal/web/labels.py REASONS).
            body = _("Lease %(lease)s (%(id)s) is now %(state)s.") % words
            return subject, f"{body} {_(reason) if reason else ''}".rstrip()

        transaction.on_commit(lambda: _mail(lease, compose))


def expiring(lease: Lease, minutes: int) -> None:
    group, message = tenant_group(lease.tenant_id), _payload(lease)
    message["event"]["warning"] = f"ends in {minutes} minutes"
    transaction.on_commit(lambda: _broadcast(group, message))
    _announce(lease, "lease.expiring", {"minutes": minutes, "end_at": lease.end_at.isoformat()})
    words = {"lease": str(lease), "id": lease.pk, "minutes": minutes,
             "end": f"{lease.end_at:%Y-%m-%d %H:%M}"}

    def compose() -> tuple[str, str]:
        return (_("[gpupool] %(lease)s ends in %(minutes)s minutes") % words,
                _("Lease %(lease)s (%(id)s) ends at %(end)s UTC. Extend it in the portal if you "
                  "need more time.") % words)

    transaction.on_commit(lambda: _mail(lease, compose))


def preempting(lease: Lease, at: Any) -> None:
    """A running spot lease will be preempted at ``at`` (its notice period)."""
    group, message = tenant_group(lease.tenant_id), _payload(lease)
    message["event"]["warning"] = f"preempted at {at:%H:%M:%S} UTC"
    transaction.on_commit(lambda: _broadcast(group, message))
    _announce(lease, "lease.notice", {"preempted_at": at.isoformat()})
    words = {"lease": str(lease), "id": lease.pk, "at": f"{at:%H:%M}",
             "when": f"{at:%Y-%m-%d %H:%M:%S}"}

    def compose() -> tuple[str, str]:
        return (_("[gpupool] %(lease)s will be preempted at %(at)s UTC") % words,
                _("Lease %(lease)s (%(id)s) is a spot lease and its GPUs are needed by an "
                  "on-demand order: it ends at %(when)s UTC. Save your work; order an "
                  "on-demand or reserved lease for work that must not be interrupted.")
                % words)

    transaction.on_commit(lambda: _mail(lease, compose))


def healing(lease: Lease, event: str, reason: str, data: dict[str, Any]) -> None:
    """Hardware of a running lease failed (``lease.healing``), was replaced
    (``lease.healed``), or nothing could replace it (``lease.degraded``): WebSocket, mail,
    and the outbound channels (``hooks.lease_event``), naming what failed and what
    replaced it."""
    group, message = tenant_group(lease.tenant_id), _payload(lease)
    message["event"].update({"condition": lease.condition, "healing": event,
                             "warning": reason, "data": data})
    transaction.on_commit(lambda: _broadcast(group, message))
    hooks.announce_on_commit(event=event, tenant_id=lease.tenant_id, lease_id=lease.pk,
                             state=lease.state, reason=reason, data=data)
    name, pk = str(lease), lease.pk

    def compose() -> tuple[str, str]:
        words = {"lease": name, "id": pk, "what": reason}
        subjects = {"lease.healing": _("[gpupool] %(lease)s: hardware failed, replacing it"),
                    "lease.healed": _("[gpupool] %(lease)s: failed hardware replaced"),
                    "lease.degraded": _("[gpupool] %(lease)s runs degraded")}
        body = _("Lease %(lease)s (%(id)s): %(what)s. The failed hardware is not billed.")
        return subjects.get(event, subjects["lease.healing"]) % words, body % words

    transaction.on_commit(lambda: _mail(lease, compose))
