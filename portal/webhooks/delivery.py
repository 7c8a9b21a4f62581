"""One try of one message: claim it, sign it, POST it (outside any transaction), record it.

Idempotent and safe to run twice: a message that is not due or already claimed is left
alone (``services.message_claim``), so a duplicated or re-driven Celery message sends
nothing extra. The beat's :func:`sweep` re-drives tries whose Celery message was lost.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from portal.webhooks import egress, selectors, services, signing


def claim_hold_s() -> float:
    """Long enough for a try with every redirect to time out, plus a margin."""
    return float(settings.GPUPOOL_WEBHOOKS_TIMEOUT_S) * (egress.MAX_REDIRECTS + 1) + 30


def deliver(message_id: Any) -> str:
    """Run one try if the message is due; answers what happened (for logs and tests)."""
    message = services.message_claim(message_id=message_id, hold_s=claim_hold_s())
    if message is None:
        return "skipped"
    now = timezone.now()
    headers = signing.headers(secrets_=services.signing_secrets(message.endpoint, now),
                              msg_id=message.msg_id, timestamp=int(now.timestamp()),
                              body=message.body)
    outcome = egress.post(message.endpoint.url, headers=headers, body=message.body.encode())
    message = services.attempt_record(message=message, outcome=outcome, at=now)
    return str(message.status)


def sweep(*, limit: int = 500) -> int:
    """Beat: queue a try for every pending message overdue by more than the grace."""
    grace = float(settings.GPUPOOL_WEBHOOKS_SWEEP_GRACE_S)
    due = selectors.due_message_ids(before=timezone.now() - timedelta(seconds=grace),
                                    limit=limit)
    for message_id in due:
        services.send_task(message_id)
    return len(due)
