"""Unclean GPUs after a teardown (issue 10.1): the agent reports ``observed.gpu_cleaning``
(agents/node/cleaning.py); a GPU reported ``clean: false`` is quarantined — the snapshot
offers only healthy GPUs, so it is never leased again until staff release it (console →
GPU health) — audited, alerted, and whatever waits to run on it is moved
(``hooks.gpus_quarantined``: leasing re-queues those leases, fleet does not import it)."""

from __future__ import annotations

from typing import Any

from portal.core.services import audit_record
from portal.fleet import hooks
from portal.fleet.models import NodeObservedState
from portal.fleet.services.health import QUARANTINED, gpu_quarantine
from portal.inventory.models import Node


def _checks(observed: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in observed.get("gpu_cleaning") or [] if isinstance(c, dict)]


def _key(check: dict[str, Any]) -> tuple[Any, Any, Any]:
    return check.get("gpu_index"), check.get("lease_id"), check.get("checked_at")


def previous_observed(node: Node) -> dict[str, Any]:
    """The node's observed document before this report (empty if none yet)."""
    try:
        return dict(node.observed.document or {})
    except NodeObservedState.DoesNotExist:
        return {}


def new_unclean(observed: dict[str, Any], previous: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``clean: false`` checks this report brings (the agent repeats its latest check
    of each GPU in every report: one already seen is not acted on again, so a GPU staff
    released is not quarantined again by the same old check)."""
    seen = {_key(c) for c in _checks(previous)}
    return [c for c in _checks(observed) if c.get("clean") is False and _key(c) not in seen]


def _reason(check: dict[str, Any]) -> str:
    processes = check.get("processes") or []
    lease = check.get("lease_id") or "?"
    what = f"{len(processes)} process(es) left" if processes else "not verified clean"
    return f"unclean after teardown of {lease}: {what}"


def unclean_reported(*, node: Node, observed: dict[str, Any],
                     previous: dict[str, Any]) -> list[int]:
    """Quarantine the GPUs this report says are unclean; the indexes quarantined."""
    indexes: list[int] = []
    for check in new_unclean(observed, previous):
        index = int(check["gpu_index"])
        gpu_quarantine(node=node, index=index, uuid=str(check.get("gpu_uuid") or ""),
                       health=QUARANTINED, reason=_reason(check))
        audit_record(actor=None, action="fleet.gpu_unclean", obj=node, changes={
            "gpu_index": index, "lease_id": check.get("lease_id"),
            "processes": check.get("processes") or [],
            "not_reset": check.get("not_reset") or []})
        indexes.append(index)
    if indexes:
        hooks.gpus_quarantined(node.pk, sorted(set(indexes)))
    return indexes
