"""Thin Celery tasks: a message id in, one try (``portal.webhooks.delivery``); the beat's
sweep re-drives tries whose Celery message was lost."""

from __future__ import annotations

from portal.core.tasks import durable_task
from portal.webhooks import delivery, services

SWEEP = "portal.webhooks.tasks.sweep"


@durable_task(name=services.DELIVER, time_limit=120)
def deliver(message_id: str) -> str:
    return delivery.deliver(message_id)


@durable_task(name=SWEEP, time_limit=60)
def sweep() -> int:
    return delivery.sweep()
