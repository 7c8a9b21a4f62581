"""Thin periodic tasks of the fleet app (schedule them in CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from typing import Any

from portal.core.tasks import durable_task
from portal.fleet.services import health, samples


@durable_task(time_limit=60)
def fleet_health_sweep() -> int:
    """Flag nodes whose agent stopped reporting (idempotent)."""
    return health.health_sweep()


@durable_task(time_limit=600)
def fleet_telemetry_purge() -> dict[str, Any]:
    """Delete telemetry history and idempotency keys past retention (idempotent)."""
    return samples.telemetry_purge()
