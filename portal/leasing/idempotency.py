"""Stripe-style ``Idempotency-Key`` for order creation (per tenant).

The key is claimed by a unique-index insert in the same transaction as the order. A
concurrent duplicate blocks on that index until the first commits, then replays the stored
response (identical body); if the first is still running after ``LOCK_WAIT`` the duplicate
gets 409. The same key with a different body is a 422. A request that fails validation
stores nothing, so a corrected retry with the same key can succeed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError, Conflict
from portal.leasing.models import IdempotencyKey
from portal.tenants.models import Tenant

LOCK_WAIT = "10s"
MAX_KEY = 255


class KeyReused(ApplicationError):
    status_code = 422
    code = "idempotency_key_reused"


def request_hash(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _replay(row: IdempotencyKey, digest: str) -> tuple[int, dict[str, Any]]:
    if row.request_hash != digest:
        raise KeyReused(_("This Idempotency-Key was used with a different request body."),
                        fields={"Idempotency-Key": [_("Already used with another body.")]})
    return row.response_status, row.response_body


def run(*, tenant: Tenant, key: str, body: Any,
        create: Callable[[], tuple[int, dict[str, Any]]]) -> tuple[int, dict[str, Any]]:
    if not key or len(key) > MAX_KEY:
        raise ApplicationError(_("Invalid Idempotency-Key."), fields={
            "Idempotency-Key": [_("1 to %(max)s characters.") % {"max": MAX_KEY}]})
    digest = request_hash(body)
    existing = IdempotencyKey.objects.filter(tenant=tenant, key=key).first()
    if existing is not None:
        return _replay(existing, digest)
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
            row = IdempotencyKey.objects.create(tenant=tenant, key=key, request_hash=digest,
                                                response_status=0, response_body={})
            status, data = create()
            row.response_status, row.response_body = status, data
            row.save(update_fields=["response_status", "response_body"])
            return status, data
    except IntegrityError:
        existing = IdempotencyKey.objects.filter(tenant=tenant, key=key).first()
        if existing is None:
            raise
        return _replay(existing, digest)
    except OperationalError as exc:
        if "lock timeout" in str(exc) or "canceling statement" in str(exc):
            raise Conflict(_("A request with this Idempotency-Key is still in progress."),
                           fields={"Idempotency-Key": [_("In progress; retry later.")]}) from exc
        raise
