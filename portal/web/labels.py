"""Translatable labels for the choices the models spell in English only."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

from portal.leasing.models import LeaseState, Locality, Priority
from portal.tenants.models import Role

STATES = {
    LeaseState.REQUESTED: _("Requested"), LeaseState.QUEUED: _("Queued"),
    LeaseState.SCHEDULED: _("Scheduled"), LeaseState.PROVISIONING: _("Provisioning"),
    LeaseState.ACTIVE: _("Active"), LeaseState.RELEASING: _("Releasing"),
    LeaseState.ENDED: _("Ended"), LeaseState.REJECTED: _("Rejected"),
    LeaseState.CANCELLED: _("Cancelled"), LeaseState.FAILED: _("Failed"),
    LeaseState.PREEMPTED: _("Preempted"), LeaseState.EXPIRED: _("Expired"),
}
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
               "preemption_notice": _("Preemption notice")}
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
# A tone per state for badges; the text label is always shown too (not colour alone).
TONES = {
    LeaseState.ACTIVE: "ok", LeaseState.PROVISIONING: "info", LeaseState.SCHEDULED: "info",
    LeaseState.QUEUED: "wait", LeaseState.REQUESTED: "wait", LeaseState.RELEASING: "info",
    LeaseState.FAILED: "bad", LeaseState.REJECTED: "bad", LeaseState.PREEMPTED: "bad",
}


def choices(mapping: dict) -> list[tuple[str, object]]:
    return [(str(k), v) for k, v in mapping.items()]
