"""Reads of webhook endpoints and their delivery log, scoped to one tenant (the caller's:
resolved by ``portal.tenants.access``), so another tenant's endpoint is simply not found."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from portal.core.errors import NotFound
from portal.tenants.models import Membership, Role, Tenant
from portal.webhooks.models import ALL_EVENTS, Endpoint, Message


def endpoint_list(*, tenant: Tenant) -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(tenant=tenant).order_by("created")


def endpoint_get(*, tenant: Tenant, endpoint_id: Any) -> Endpoint:
    endpoint = endpoint_list(tenant=tenant).filter(pk=endpoint_id).first()
    if endpoint is None:
        raise NotFound(_("No such webhook endpoint."))
    return endpoint


def message_list(*, endpoint: Endpoint) -> QuerySet[Message]:
    return endpoint.messages.prefetch_related("attempts").order_by("-created")


def message_get(*, tenant: Tenant, message_id: Any) -> Message:
    message = (Message.objects.filter(endpoint__tenant=tenant, pk=message_id)
               .select_related("endpoint").first())
    if message is None:
        raise NotFound(_("No such webhook delivery."))
    return message


def endpoints_for_event(*, tenant_id: Any, event: str) -> list[Endpoint]:
    """The tenant's enabled endpoints that asked for ``event`` (or for everything)."""
    qs = Endpoint.objects.filter(tenant_id=tenant_id, enabled=True)
    return list(qs.filter(Q(events__contains=[event]) | Q(events__contains=[ALL_EVENTS])))


def due_message_ids(*, before: datetime, limit: int) -> list[str]:
    """Pending messages whose try is overdue (a lost or stuck Celery message)."""
    qs = (Message.objects.filter(status=Message.Status.PENDING, next_attempt_at__lte=before,
                                 endpoint__enabled=True)
          .order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
    return [str(pk) for pk in qs]


def admin_emails(*, endpoint: Endpoint) -> list[str]:
    rows = Membership.objects.filter(tenant_id=endpoint.tenant_id,
                                     role__in=[Role.OWNER, Role.ADMIN])
    emails = {e for e in rows.values_list("user__email", flat=True) if e}
    if endpoint.created_by is not None and endpoint.created_by.email:
        emails.add(endpoint.created_by.email)
    return sorted(emails)
