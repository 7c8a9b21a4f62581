"""Lease events to people: the tenant's WebSocket group and email (after commit)."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.mail import send_mail
from django.db import transaction

from portal.leasing.models import Lease, LeaseState
from portal.tenants.models import Membership, Role

log = logging.getLogger(__name__)
EMAIL_STATES = {LeaseState.ACTIVE, LeaseState.ENDED, LeaseState.EXPIRED, LeaseState.FAILED,
                LeaseState.PREEMPTED}


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


def _recipients(lease: Lease) -> list[str]:
    emails = set(Membership.objects.filter(tenant=lease.tenant, role__in=[
        Role.OWNER, Role.ADMIN]).values_list("user__email", flat=True))
    if lease.created_by is not None and lease.created_by.email:
        emails.add(lease.created_by.email)
    return sorted(e for e in emails if e)


def _mail(lease: Lease, subject: str, body: str) -> None:
    to = _recipients(lease)
    if to:
        try:
            send_mail(subject, body, None, to, fail_silently=False)
        except Exception:
            log.exception("could not send lease mail")


def lease_changed(lease: Lease) -> None:
    group, message = tenant_group(lease.tenant_id), _payload(lease)
    state = lease.state
    transaction.on_commit(lambda: _broadcast(group, message))
    if state in EMAIL_STATES:
        subject = f"[gpupool] {lease} is {lease.get_state_display().lower()}"
        body = f"Lease {lease} ({lease.pk}) is now {state}. {lease.state_reason}"
        transaction.on_commit(lambda: _mail(lease, subject, body))


def expiring(lease: Lease, minutes: int) -> None:
    group, message = tenant_group(lease.tenant_id), _payload(lease)
    message["event"]["warning"] = f"ends in {minutes} minutes"
    transaction.on_commit(lambda: _broadcast(group, message))
    subject = f"[gpupool] {lease} ends in {minutes} minutes"
    body = (f"Lease {lease} ({lease.pk}) ends at {lease.end_at:%Y-%m-%d %H:%M} UTC. "
            "Extend it in the portal if you need more time.")
    transaction.on_commit(lambda: _mail(lease, subject, body))


def preempting(lease: Lease, at: Any) -> None:
    """A running spot lease will be preempted at ``at`` (its notice period)."""
    group, message = tenant_group(lease.tenant_id), _payload(lease)
    message["event"]["warning"] = f"preempted at {at:%H:%M:%S} UTC"
    transaction.on_commit(lambda: _broadcast(group, message))
    subject = f"[gpupool] {lease} will be preempted at {at:%H:%M} UTC"
    body = (f"Lease {lease} ({lease.pk}) is a spot lease and its GPUs are needed by an "
            f"on-demand order: it ends at {at:%Y-%m-%d %H:%M:%S} UTC. Save your work; "
            "order an on-demand or reserved lease for work that must not be interrupted.")
    transaction.on_commit(lambda: _mail(lease, subject, body))
