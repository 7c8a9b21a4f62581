"""The event types an endpoint can ask for (``["*"]``: all of them)."""

from __future__ import annotations

from portal.leasing.models import LeaseState

LEASE_WARNINGS = ("lease.expiring", "lease.notice", "lease.healing", "lease.degraded",
                  "lease.healed")
EVENT_TYPES: tuple[str, ...] = tuple(dict.fromkeys(
    [f"lease.{state}" for state in LeaseState.values] + list(LEASE_WARNINGS)
    + ["budget.alert"]))
