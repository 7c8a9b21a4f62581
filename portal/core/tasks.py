"""One decorator for every Celery task: at-least-once, explicit limits (house rule 5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import shared_task


def durable_task(*, time_limit: int = 120, **options: Any) -> Callable[..., Any]:
    """``acks_late`` + ``reject_on_worker_lost``: a killed worker's task runs again, so
    the task must be idempotent (take IDs, lock, check "already done?")."""
    return shared_task(acks_late=True, reject_on_worker_lost=True, time_limit=time_limit,
                       soft_time_limit=max(time_limit - 10, 1), ignore_result=True, **options)
