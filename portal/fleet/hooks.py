"""Fleet → other apps, without fleet importing them: callbacks run when a node converges.

An app registers at start-up (``AppConfig.ready``): ``on_node_converged(callback)``. The
ingest service calls ``node_converged(node_id)`` in the report's transaction when a node's
observed state changed, so whatever waits for that node (a lease to activate or end) moves
in the same commit; the reconciler stays the backstop for an event that is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import DatabaseError, transaction

log = logging.getLogger(__name__)

NodeConverged = Callable[[int], None]
_callbacks: list[NodeConverged] = []


def on_node_converged(callback: NodeConverged) -> None:
    """Register ``callback(node_id)`` (once; registering it again is a no-op)."""
    if callback not in _callbacks:
        _callbacks.append(callback)


def node_converged(node_id: int) -> None:
    """Run every callback, each in a savepoint: a failing one (a deadlock victim, say) is
    logged and undone alone, and the report that carried the news is still stored."""
    for callback in list(_callbacks):
        try:
            with transaction.atomic():
                callback(node_id)
        except DatabaseError:
            log.warning("node %s converged: %r failed; the reconciler re-drives it",
                        node_id, callback, exc_info=True)


GpusQuarantined = Callable[[int, list[int]], None]
_quarantine_callbacks: list[GpusQuarantined] = []


def on_gpus_quarantined(callback: GpusQuarantined) -> None:
    """Register ``callback(node_id, gpu_indexes)``: GPUs of a node were just quarantined
    (an unclean teardown): whatever waits to run on them must move elsewhere."""
    if callback not in _quarantine_callbacks:
        _quarantine_callbacks.append(callback)


def gpus_quarantined(node_id: int, indexes: list[int]) -> None:
    """Run every callback in the caller's transaction (unlike ``node_converged`` a failure
    is not swallowed: a lease must never be activated on a GPU found unclean)."""
    for callback in list(_quarantine_callbacks):
        callback(node_id, indexes)


PartsFailed = Callable[[int, list[int] | None, str, datetime], None]
_failed_callbacks: list[PartsFailed] = []


def on_parts_failed(callback: PartsFailed) -> None:
    """Register ``callback(node_id, gpu_indexes, cause, fault_at)``: hardware went out of
    service (``gpu_indexes`` None: the whole node). Leasing fences it out of running
    leases and finds replacements (``portal.leasing.lifecycle.healing``)."""
    if callback not in _failed_callbacks:
        _failed_callbacks.append(callback)


def parts_failed(node_id: int, indexes: list[int] | None, cause: str,
                 fault_at: datetime) -> None:
    """Run every callback in the caller's transaction: the fence commits with the verdict
    (a failed part must never stay granted because a callback was lost)."""
    for callback in list(_failed_callbacks):
        callback(node_id, indexes, cause, fault_at)
