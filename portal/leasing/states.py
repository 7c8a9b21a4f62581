"""The one way to change a lease's state (house rule 4): an explicit transition table.

Diagram and meanings: docs/leasing.md.
"""

from __future__ import annotations

from typing import Any

from portal.core.errors import Conflict
from portal.leasing.models import Lease, LeaseEvent
from portal.leasing.models import LeaseState as S

ALLOWED: dict[str, frozenset[str]] = {
    S.REQUESTED: frozenset({S.QUEUED, S.REJECTED, S.CANCELLED}),
    S.QUEUED: frozenset({S.SCHEDULED, S.PROVISIONING, S.CANCELLED, S.REJECTED, S.EXPIRED}),
    S.SCHEDULED: frozenset({S.PROVISIONING, S.CANCELLED, S.QUEUED, S.PREEMPTED, S.FAILED}),
    S.PROVISIONING: frozenset({S.ACTIVE, S.QUEUED, S.FAILED, S.RELEASING, S.CANCELLED}),
    S.ACTIVE: frozenset({S.RELEASING}),
    S.RELEASING: frozenset({S.ENDED, S.EXPIRED, S.PREEMPTED, S.FAILED, S.CANCELLED}),
    S.ENDED: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
    S.PREEMPTED: frozenset(),
    S.EXPIRED: frozenset(),
}
TERMINAL = frozenset(s for s, nxt in ALLOWED.items() if not nxt)
WAITING = frozenset({S.REQUESTED, S.QUEUED})
HOLDING = frozenset({S.SCHEDULED, S.PROVISIONING, S.ACTIVE, S.RELEASING})
CANCELLABLE = frozenset({S.REQUESTED, S.QUEUED, S.SCHEDULED, S.PROVISIONING})


class IllegalTransition(Conflict):
    code = "illegal_transition"


def transition(lease: Lease, to: str, *, actor: str = "system", reason: str = "",
               data: dict[str, Any] | None = None, fields: tuple[str, ...] = ()) -> LeaseEvent:
    """Move ``lease`` (already locked by the caller) to ``to`` and record the event.

    ``fields`` names other attributes the caller changed, saved in the same UPDATE.
    """
    if to not in ALLOWED[lease.state]:
        raise IllegalTransition(f"A lease cannot go from {lease.state} to {to}.",
                                fields={"state": [f"{lease.state} → {to} is not allowed"]})
    old = lease.state
    lease.state = to
    lease.state_reason = reason[:300]
    lease.save(update_fields=["state", "state_reason", "updated", *fields])
    return LeaseEvent.objects.create(lease=lease, from_state=old, to_state=to, actor=actor,
                                     reason=reason[:300], data=data or {})


def record(lease: Lease, kind: str, *, actor: str = "system", reason: str = "",
           data: dict[str, Any] | None = None) -> LeaseEvent:
    """An event that is not a state change (extension, warning, placement detail)."""
    return LeaseEvent.objects.create(lease=lease, kind=kind, actor=actor, reason=reason[:300],
                                     data=data or {}, from_state=lease.state,
                                     to_state=lease.state)
