"""Every write to webhook endpoints and their messages (audited, atomic, keyword-only).

Deliveries themselves (the HTTP call) run in ``portal.webhooks.delivery``, outside any
transaction; it records each try through :func:`attempt_record`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.celery import app
from portal.core.errors import ApplicationError, Conflict
from portal.core.services import audit_record
from portal.tenants.access import AnyUser, require_role
from portal.tenants.models import Role, Tenant
from portal.webhooks import egress, selectors, signing
from portal.webhooks.catalogue import EVENT_TYPES
from portal.webhooks.models import ALL_EVENTS, Attempt, Endpoint, Message

log = logging.getLogger(__name__)
DELIVER = "portal.webhooks.tasks.deliver"  # the task's registered name (sent by name)


@dataclass(frozen=True)
class IssuedEndpoint:
    endpoint: Endpoint
    secret: str  # shown once


def schedule() -> list[float]:
    return [float(s) for s in settings.GPUPOOL_WEBHOOKS_SCHEDULE_S]


def send_task(message_id: str, countdown: float = 0) -> None:
    try:
        app.send_task(DELIVER, args=[message_id], countdown=max(countdown, 0))
    except Exception:  # Redis down: the row is committed; the beat's sweep re-drives it
        log.warning("could not enqueue webhook %s", message_id, exc_info=True)


def _send_on_commit(message_id: Any, countdown: float = 0) -> None:
    key = str(message_id)
    transaction.on_commit(lambda: send_task(key, countdown))


def _clean_events(events: Any) -> list[str]:
    if not isinstance(events, list) or not events:
        raise ApplicationError(_("Choose at least one event."),
                               fields={"events": [_('A non-empty list, or ["*"] for all.')]})
    unknown = sorted({str(e) for e in events} - set(EVENT_TYPES) - {ALL_EVENTS})
    if unknown:
        raise ApplicationError(_("Unknown event types."), fields={"events": [
            _("Unknown: %(names)s.") % {"names": ", ".join(unknown)}]})
    return [ALL_EVENTS] if ALL_EVENTS in events else sorted(set(events))


def _clean_url(url: str) -> str:
    try:
        if egress.allow_private():
            egress.split_url(url)
        else:
            egress.pin(url)
    except egress.Refused as exc:
        raise ApplicationError(_("This URL cannot receive webhooks."),
                               fields={"url": [str(exc)]}) from exc
    return url


@transaction.atomic
def endpoint_create(*, actor: AnyUser, tenant: Tenant, url: str, events: list[str],
                    description: str = "") -> IssuedEndpoint:
    require_role(actor, tenant, Role.ADMIN)
    secret = signing.new_secret()
    endpoint = Endpoint.objects.create(tenant=tenant, url=_clean_url(url),
                                       events=_clean_events(events), secret=secret,
                                       description=description, created_by=actor)
    audit_record(actor=actor, action="webhook.create", obj=endpoint, tenant=tenant,
                 changes={"url": url, "events": endpoint.events})
    return IssuedEndpoint(endpoint=endpoint, secret=secret)


@transaction.atomic
def endpoint_update(*, actor: AnyUser, endpoint: Endpoint, url: str | None = None,
                    events: list[str] | None = None, description: str | None = None,
                    enabled: bool | None = None) -> Endpoint:
    require_role(actor, endpoint.tenant, Role.ADMIN)
    endpoint = Endpoint.objects.select_for_update().get(pk=endpoint.pk)
    changes: dict[str, Any] = {}
    if url is not None and url != endpoint.url:
        endpoint.url = changes["url"] = _clean_url(url)
    if events is not None:
        endpoint.events = changes["events"] = _clean_events(events)
    if description is not None:
        endpoint.description = description
    if enabled is not None and enabled != endpoint.enabled:
        endpoint.enabled = changes["enabled"] = enabled
        endpoint.disabled_reason = "" if enabled else _("Disabled by %(who)s.") % {
            "who": actor.get_username()}
        endpoint.disabled_at = None if enabled else timezone.now()
    endpoint.save()
    audit_record(actor=actor, action="webhook.update", obj=endpoint, tenant=endpoint.tenant,
                 changes=changes)
    return endpoint


@transaction.atomic
def endpoint_delete(*, actor: AnyUser, endpoint: Endpoint) -> None:
    require_role(actor, endpoint.tenant, Role.ADMIN)
    audit_record(actor=actor, action="webhook.delete", obj=endpoint, tenant=endpoint.tenant,
                 changes={"url": endpoint.url})
    endpoint.delete()


@transaction.atomic
def endpoint_rotate_secret(*, actor: AnyUser, endpoint: Endpoint) -> IssuedEndpoint:
    """A new secret; the old one keeps signing too for ``GPUPOOL_WEBHOOKS_OVERLAP_S``."""
    require_role(actor, endpoint.tenant, Role.ADMIN)
    endpoint = Endpoint.objects.select_for_update().get(pk=endpoint.pk)
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_expires_at = timezone.now() + timedelta(
        seconds=float(settings.GPUPOOL_WEBHOOKS_OVERLAP_S))
    endpoint.secret = signing.new_secret()
    endpoint.save(update_fields=["secret", "previous_secret", "previous_expires_at",
                                 "updated"])
    audit_record(actor=actor, action="webhook.rotate_secret", obj=endpoint,
                 tenant=endpoint.tenant)
    return IssuedEndpoint(endpoint=endpoint, secret=endpoint.secret)


def signing_secrets(endpoint: Endpoint, now: datetime) -> list[str]:
    out = [endpoint.secret]
    if endpoint.previous_secret and endpoint.previous_expires_at \
            and endpoint.previous_expires_at > now:
        out.append(endpoint.previous_secret)
    return out


def messages_enqueue(*, tenant_id: Any, event: str,
                     data: dict[str, Any] | Callable[[], dict[str, Any]]) -> list[Message]:
    """One message per endpoint of the tenant that asked for ``event``; sent after commit.
    ``data`` may be a function: it runs only when some endpoint wants the event (one query
    per news for tenants without webhooks)."""
    endpoints = selectors.endpoints_for_event(tenant_id=tenant_id, event=event)
    if not endpoints:
        return []
    now = timezone.now()
    body = json.dumps({"type": event, "timestamp": now.isoformat(),
                       "data": data() if callable(data) else data},
                      cls=DjangoJSONEncoder, separators=(",", ":"), sort_keys=True)
    return _messages_create(endpoints, event, body, now)


@transaction.atomic
def _messages_create(endpoints: list[Endpoint], event: str, body: str,
                     now: datetime) -> list[Message]:
    made = []
    first = now + timedelta(seconds=schedule()[0])
    for endpoint in endpoints:
        message = Message.objects.create(msg_id=signing.new_msg_id(), endpoint=endpoint,
                                         event_type=event, body=body, next_attempt_at=first)
        _send_on_commit(message.pk, schedule()[0])
        made.append(message)
    return made


@transaction.atomic
def message_resend(*, actor: AnyUser, message: Message) -> Message:
    """Send a message again now (the same ``webhook-id``): one try, no retries after it."""
    require_role(actor, message.endpoint.tenant, Role.ADMIN)
    message = Message.objects.select_for_update().select_related("endpoint").get(pk=message.pk)
    if not message.endpoint.enabled:
        raise Conflict(_("The endpoint is disabled: enable it first."),
                       fields={"endpoint": [_("Disabled.")]})
    message.status, message.manual = Message.Status.PENDING, True
    message.next_attempt_at = timezone.now()
    message.save(update_fields=["status", "manual", "next_attempt_at"])
    audit_record(actor=actor, action="webhook.resend", obj=message.endpoint,
                 tenant=message.endpoint.tenant, changes={"msg_id": message.msg_id})
    _send_on_commit(message.pk)
    return message


def message_claim(*, message_id: Any, hold_s: float) -> Message | None:
    """Take a due message for one try (None: not due, not pending, or someone has it).
    The claim pushes ``next_attempt_at`` past the try, so a lost worker's try comes due
    again for the sweep and a duplicate task finds nothing to do."""
    now = timezone.now()
    claimed = Message.objects.filter(
        pk=message_id, status=Message.Status.PENDING, next_attempt_at__lte=now,
        endpoint__enabled=True).update(next_attempt_at=now + timedelta(seconds=hold_s))
    if not claimed:
        return None
    return (Message.objects.select_related("endpoint", "endpoint__tenant", "endpoint__created_by")
            .get(pk=message_id))


def _disable(endpoint: Endpoint, reason: str, now: datetime) -> None:
    Endpoint.objects.filter(pk=endpoint.pk).update(enabled=False, disabled_reason=reason[:300],
                                                   disabled_at=now)
    audit_record(actor=None, action="webhook.disable", obj=endpoint, tenant=endpoint.tenant,
                 changes={"reason": reason})


def _tell_admins(endpoint: Endpoint, reason: str) -> Callable[[], None]:
    to = selectors.admin_emails(endpoint=endpoint)
    subject = _("[gpupool] Webhook endpoint disabled: %(url)s") % {"url": endpoint.url}
    body = _("The webhook endpoint %(url)s (%(id)s) was disabled: %(reason)s Fix the "
             "receiver, then enable the endpoint again in the portal.") % {
        "url": endpoint.url, "id": endpoint.pk, "reason": reason}

    def mail() -> None:
        try:
            if to:
                send_mail(subject, body, None, to, fail_silently=False)
        except Exception:
            log.exception("could not mail webhook admins")
    return mail


@transaction.atomic
def attempt_record(*, message: Message, outcome: egress.Outcome, at: datetime) -> Message:
    """Write one try and decide what follows: delivered, the next try, or give up."""
    Attempt.objects.create(message=message, at=at, response_status=outcome.status,
                           response_excerpt=outcome.excerpt, error=outcome.error,
                           duration_ms=outcome.duration_ms)
    message.attempt_count += 1
    message.last_status = outcome.status
    steps, endpoint = schedule(), message.endpoint
    if outcome.status is not None and 200 <= outcome.status < 300:
        message.status, message.next_attempt_at = Message.Status.DELIVERED, None
    elif outcome.status == 410:
        message.status, message.next_attempt_at = Message.Status.FAILED, None
        _disable(endpoint, _("The receiver answered 410 Gone."), at)
    elif message.manual or message.step + 1 >= len(steps):
        message.status, message.next_attempt_at = Message.Status.FAILED, None
        if not message.manual:
            reason = _("%(n)s tries failed, the last with %(what)s.") % {
                "n": message.attempt_count, "what": outcome.status or outcome.error}
            _disable(endpoint, reason, at)
            transaction.on_commit(_tell_admins(endpoint, reason))
    else:
        message.step += 1
        message.next_attempt_at = at + timedelta(seconds=steps[message.step])
        _send_on_commit(message.pk, steps[message.step])
    message.save(update_fields=["attempt_count", "last_status", "status", "step",
                                "next_attempt_at"])
    return message
