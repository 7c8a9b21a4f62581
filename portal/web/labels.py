"""Translatable labels for the choices the models spell in English only."""

from __future__ import annotations

import re

from django.utils.translation import gettext, gettext_noop, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from portal.leasing import states
from portal.leasing.models import Locality, Priority
from portal.tenants.models import Role

# Lease states: the one label map is portal.leasing.states.LABELS (and TONES).
STATES = states.LABELS
ROLES = {Role.OWNER: _("Owner"), Role.ADMIN: _("Admin"), Role.MEMBER: _("Member"),
         Role.VIEWER: _("Viewer")}
PRIORITIES = {Priority.RESERVED: _("Reserved"), Priority.ON_DEMAND: _("On demand"),
              Priority.SPOT: _("Spot (preemptible)")}
LOCALITIES = {Locality.ANY: _("Anywhere"), Locality.NVLINK: _("One NVLink domain"),
              Locality.NODE: _("One node"), Locality.LEAF: _("One leaf switch"),
              Locality.SPINE: _("Fewest spine hops")}
EVENT_KINDS = {"transition": _("State change"), "extended": _("Extended"),
               "extension": _("Extended"), "warning": _("Warning"),
               "placement": _("Placement"), "hardware": _("Hardware problem"),
               "preemption_notice": _("Preemption notice"),
               "expiry_warning": _("Expiry warning")}
# The leasing app's fixed event reasons (free text from users is shown as written).
REASONS = {
    "order accepted": _("order accepted"), "placed": _("placed"),
    "all nodes converged": _("all nodes converged"), "released": _("released"),
    "reached its end time": _("reached its end time"),
    "provisioning failed": _("provisioning failed"),
    "reserved for a later start": _("reserved for a later start"),
    "nodes did not converge; retrying elsewhere": _("nodes did not converge; retrying elsewhere"),
    "teardown timed out": _("teardown timed out"), "released early": _("released early"),
    "cancelled": _("cancelled"),
    "preemption notice ended": _("preemption notice ended"),
}
ALL = {**STATES, **ROLES, **PRIORITIES, **LOCALITIES}

# The console's choices, per kind (the models' own labels are English only; translating
# them there would change their migrations). Used as ``value|choice:"node_state"``.
CHOICES: dict[str, dict[str, object]] = {
    "node_state": {"ready": _("Ready"), "draining": _("Draining"), "drained": _("Drained"),
                   "down": _("Down"), "maintenance": _("Maintenance")},
    "gpu_health": {"healthy": _("Healthy"), "degraded": _("Degraded"),
                   "quarantined": _("Quarantined"), "lost": _("Lost")},
    "tenant_status": {"active": pgettext_lazy("tenant status", "Active"),
                      "suspended": _("Suspended")},
    "invoice_status": {"draft": _("Draft"), "final": _("Final")},
    "credit_category": {"Credit": _("Credit"), "Adjustment": _("Adjustment")},
    "credit_kind": {"failure": _("Platform failure"), "manual": _("Manual")},
    "partition_state": {"active": pgettext_lazy("partition state", "Active"),
                        "quarantined": _("Quarantined")},
    "priority": {str(k): v for k, v in PRIORITIES.items()},
    "lease_state": {str(k): v for k, v in STATES.items()},
    "audit_filter": {"action": _("Action"), "actor": _("Who"), "tenant": _("Tenant"),
                     "object_type": _("Object type")},
}
TONES = states.TONES


def choices(mapping: dict) -> list[tuple[str, object]]:
    return [(str(k), v) for k, v in mapping.items()]


# Event reasons the leasing app writes with a value inside (portal/leasing/lifecycle/).
_PATTERNS = [
    (re.compile(r"^ends within (?P<n>\d+) minutes$"), gettext_noop("ends within %(n)s minutes")),
    (re.compile(r"^preempted by (?P<n>[0-9a-f]{8})$"), gettext_noop("preempted by lease %(n)s")),
]


def reason_pattern(text: str) -> str | None:
    for pattern, msgid in _PATTERNS:
        match = pattern.match(text)
        if match:
            return gettext(msgid) % match.groupdict()
    return None
