"""The one way to change a lease's state (house rule 4): an explicit transition table.

Diagram and meanings: docs/leasing.md.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal.core.errors import Conflict
from portal.leasing.models import Lease, LeaseEvent
from portal.leasing.models import LeaseState as S

ALLOWED: dict[str, frozenset[str]] = {
    S.REQUESTED: frozenset({S.QUEUED, S.REJECTED, S.CANCELLED}),
    S.QUEUED: frozenset({S.SCHEDULED, S.PROVISIONING, S.CANCELLED, S.REJECTED, S.EXPIRED}),
    S.SCHEDULED: frozenset({S.PROVISIONING, S.CANCELLED, S.QUEUED, S.PREEMPTED, S.FAILED}),
    S.PROVISIONING: frozenset({S.ACTIVE, S.QUEUED, S.FAILED, S.RELEASING, S.CANCELLED}),
    S.ACTIVE: frozenset({S.NOTICE, S.RELEASING}),
    # A running spot lease told it will be preempted at ``end_at``: still granted, on the
    # hardware and billed; released (as preempted) when the notice runs out.
    S.NOTICE: frozenset({S.RELEASING}),
    S.RELEASING: frozenset({S.ENDED, S.EXPIRED, S.PREEMPTED, S.FAILED, S.CANCELLED}),
    S.ENDED: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
    S.PREEMPTED: frozenset(),
    S.EXPIRED: frozenset(),
}
# State groups: defined here once, used everywhere (query with ``state__in=sorted(GROUP)``).
TERMINAL = frozenset(s for s, nxt in ALLOWED.items() if not nxt)
WAITING = frozenset({S.REQUESTED, S.QUEUED})
# Running: its users are on the GPUs and it is billed (a preemption notice included).
RUNNING = frozenset({S.ACTIVE, S.NOTICE})
# Holds allocation rows (now or for a later start).
HOLDING = frozenset({S.SCHEDULED, S.PROVISIONING, *RUNNING, S.RELEASING})
# May be on the hardware: granted, or its teardown not yet observed (the handover fence).
ON_HARDWARE = frozenset({S.PROVISIONING, *RUNNING, S.RELEASING})
# Its users get access on its nodes and its tenant's partition includes their ports.
GRANTING = frozenset({S.PROVISIONING, *RUNNING})
# Waiting for nodes to converge: re-driven by convergence events and the reconciler.
CONVERGING = frozenset({S.PROVISIONING, S.RELEASING})
# Not ended: waiting, placed, running or being released (counts against limits).
LIVE = frozenset(ALLOWED) - TERMINAL
# Ordered and not ended, past the order's own transaction: what quotas count as committed.
COMMITTED = LIVE - {S.REQUESTED}
# Waiting for GPUs or for a later start: counts against ``max_pending_orders``.
PENDING = WAITING | {S.SCHEDULED}
# Placed on GPUs but not (yet) running: what an unclean GPU or a quarantine displaces.
PLACED = frozenset({S.SCHEDULED, S.PROVISIONING})
# Ended without ever being due to run: nothing to bill, nothing to show as cost.
NEVER_RAN = frozenset({S.REJECTED, S.CANCELLED})
CANCELLABLE = frozenset({S.REQUESTED, S.QUEUED, S.SCHEDULED, S.PROVISIONING})
EXTENDABLE = frozenset({S.QUEUED, S.SCHEDULED, S.PROVISIONING, S.ACTIVE})
RELEASABLE = RUNNING
# Problems a tenant should look at (the dashboard's attention list).
TROUBLE = frozenset({S.FAILED, S.PREEMPTED, S.REJECTED})


class IllegalTransition(Conflict):
    code = "illegal_transition"


# State names in the active language: the one label map (portal/web/labels.py uses it).
LABELS: dict[str, object] = {
    S.REQUESTED: gettext_lazy("Requested"), S.QUEUED: gettext_lazy("Queued"),
    S.SCHEDULED: gettext_lazy("Scheduled"), S.PROVISIONING: gettext_lazy("Provisioning"),
    S.ACTIVE: gettext_lazy("Active"), S.NOTICE: gettext_lazy("Preemption notice"),
    S.RELEASING: gettext_lazy("Releasing"),
    S.ENDED: gettext_lazy("Ended"), S.REJECTED: gettext_lazy("Rejected"),
    S.CANCELLED: gettext_lazy("Cancelled"), S.FAILED: gettext_lazy("Failed"),
    S.PREEMPTED: gettext_lazy("Preempted"), S.EXPIRED: gettext_lazy("Expired"),
}
# The states mailed to the tenant when entered, as words in a sentence ("… is now active").
WORDS: dict[str, object] = {
    S.ACTIVE: gettext_lazy("active"), S.ENDED: gettext_lazy("ended"),
    S.EXPIRED: gettext_lazy("expired"), S.FAILED: gettext_lazy("failed"),
    S.PREEMPTED: gettext_lazy("preempted"),
}
MAILED = frozenset(WORDS)
# A tone per state for badges; the text label is always shown too (not colour alone).
TONES: dict[str, str] = {
    S.ACTIVE: "ok", S.NOTICE: "wait", S.PROVISIONING: "info", S.SCHEDULED: "info",
    S.QUEUED: "wait", S.REQUESTED: "wait", S.RELEASING: "info",
    S.FAILED: "bad", S.REJECTED: "bad", S.PREEMPTED: "bad",
}


def label(state: str) -> str:
    """The state's name in the request's language (falls back to the stored value)."""
    return str(LABELS.get(state, state))


def transition(lease: Lease, to: str, *, actor: str = "system", reason: str = "",
               data: dict[str, Any] | None = None, fields: tuple[str, ...] = ()) -> LeaseEvent:
    """Move ``lease`` (already locked by the caller) to ``to`` and record the event.

    ``fields`` names other attributes the caller changed, saved in the same UPDATE.
    """
    if to not in ALLOWED[lease.state]:
        names = {"from": label(lease.state).lower(), "to": label(to).lower()}
        raise IllegalTransition(_("A lease cannot go from %(from)s to %(to)s.") % names,
                                fields={"state": [_("%(from)s → %(to)s is not allowed")
                                                  % names]})
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
