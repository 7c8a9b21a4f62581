"""What the leasing app announces (portal/core/hooks.py): something happened to a lease
that the tenant's people and tools should hear about.

``lease_event`` carries one :class:`LeaseNews` after the transaction that made it commits:
a state entered (``lease.active``, ``lease.ended`` …), a warning (``lease.expiring``,
``lease.notice``), or the healing of a running lease (``lease.healing``,
``lease.degraded``, ``lease.healed``). Outbound channels (webhooks) connect to it; the
WebSocket and e-mail stay in ``portal.leasing.notify``, which emits it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from portal.core.hooks import Hook


@dataclass(frozen=True)
class LeaseNews:
    event: str  # "lease.<state>" or "lease.<warning>", e.g. "lease.active", "lease.healing"
    tenant_id: str
    lease_id: str
    state: str
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)


lease_event: Hook[LeaseNews] = Hook("leasing.lease_event")


def announce_on_commit(*, event: str, tenant_id: Any, lease_id: Any, state: str,
                       reason: str = "", data: dict[str, Any] | None = None) -> None:
    """Call inside the transaction that made the news; receivers run after it commits."""
    lease_event.emit_on_commit(LeaseNews(event=event, tenant_id=str(tenant_id),
                                         lease_id=str(lease_id), state=state,
                                         reason=reason, data=dict(data or {})))
