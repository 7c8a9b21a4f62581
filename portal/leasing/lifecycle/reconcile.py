"""Driving the lifecycle: the named lease steps, the convergence event, and the
reconciler — the backstop that re-drives everything in a transitional state, so
convergence never depends on a message surviving in Redis."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from portal.core.errors import ApplicationError
from portal.fleet import hooks
from portal.fleet import services as fleet
from portal.fleet.models import NodeDesiredState
from portal.inventory.models import Node
from portal.leasing import desired, migdevices, states
from portal.leasing.lifecycle import (
    dispatch,
    expiry,
    healing,
    placing,
    provisioning,
    releasing,
    repair,
)
from portal.leasing.models import Allocation, Lease
from portal.leasing.models import LeaseState as S

log = logging.getLogger(__name__)

# The steps a ``lease_step`` task runs by name, and the step each one is followed by.
STEPS: dict[str, Callable[[object], None]] = {
    "provision": provisioning.provision_batch,
    "check_provisioned": provisioning.check_provisioned,
    "teardown": releasing.teardown,
    "check_released": releasing.check_released,
    "heal": healing.heal,
    "check_healed": healing.check_healed,
}
FOLLOW_UP = {"provision": "check_provisioned", "teardown": "check_released",
             "heal": "check_healed"}


def run_step(step: str, lease_id: object) -> str | None:
    """Run one named step; the step that should follow it, if any."""
    STEPS[step](lease_id)
    return FOLLOW_UP.get(step)


def node_converged(node_id: int) -> None:
    """A node's observed state changed (``fleet.hooks``): move what waits for it, in the
    report's transaction. Teardowns first, so a GPU handed over is pushed at once. The
    GPUs' reported MIG state first of all: the pass reads it (``migdevices.record_split``)."""
    migdevices.record_split(node_id)
    migdevices.record_uuids(node_id)
    on_node = Allocation.objects.filter(node_id=node_id).values("lease_id")
    for step, state in ((releasing.check_released, S.RELEASING),
                        (provisioning.check_provisioned, S.PROVISIONING)):
        for lease_id in Lease.objects.filter(pk__in=on_node, state=state).order_by(
                "created").values_list("pk", flat=True):
            step(lease_id)
    for lease_id in Lease.objects.filter(pk__in=on_node, state__in=sorted(states.RUNNING)
                                         ).exclude(heal_targets={}).values_list("pk", flat=True):
        healing.check_healed(lease_id)  # a replacement on this node converged


def check_leases_on(node_ids: list[Any]) -> None:
    """What a convergence event on each node does (tests and the demo drive it)."""
    for node_id in node_ids:
        node_converged(node_id)


RECONCILE_LOCK = 0x72636E6C  # "rcnl": session-scoped advisory lock id


@contextlib.contextmanager
def _single_flight() -> Iterator[bool]:
    """One reconciler at a time: a transaction-scoped PostgreSQL advisory lock, only
    tried, on a connection of the reconciler's own, held in an open transaction for the
    beat and closed after it. Closing ends the transaction, and with it the lock, whatever
    becomes of Django's connection meanwhile: a session lock on Django's connection stayed
    held for good where that connection outlives the beat (returned to the psycopg pool
    after a failed unlock) or where PgBouncer's transaction pooling runs the unlock on
    another server connection — then every reconciler skipped. A killed worker's
    connection closes with it, so its lock is freed at once (unlike a marker in Redis,
    which the crash tests caught held until it expired).
    (SQLite, the demo's database, runs one worker: always True.)"""
    if connection.vendor != "postgresql":
        yield True
        return
    with contextlib.closing(_lock_session()) as own:
        row = own.execute("SELECT pg_try_advisory_xact_lock(%s)", [RECONCILE_LOCK]).fetchone()
        yield bool(row and row[0])


def _lock_session() -> psycopg.Connection[Any]:
    """A new connection with Django's parameters (never one of its pool)."""
    params = {k: v for k, v in connection.get_connection_params().items()
              if k not in ("cursor_factory", "context")}
    return psycopg.connect(**params)


def reconcile_once() -> dict[str, int]:
    """Expire, start due reservations, warn, re-drive converging leases, re-push drifted
    nodes, and run a pass if anything is queued. Single-flight: the beat sends one every
    few seconds and a beat that finds one running returns at once, so two workers are
    never both held by reconcilers while lease steps (a fence, a replacement) wait; its
    beat messages also expire after one period, and it is time-boxed."""
    with _single_flight() as mine:
        if not mine:
            return {"skipped": 1}
        return _reconcile()


def _reconcile() -> dict[str, int]:
    # Expiry first: a reservation due now must find the lease it follows already releasing.
    counts = {"expired": expiry.expire_due()}
    counts["started"] = provisioning.start_due_reservations()
    counts["warned"] = expiry.warn_expiring()
    counts["expiries_scheduled"] = expiry.schedule_near_expiries()
    counts.update(drive_converging())
    counts["repushed"] = repush_drifted_nodes()
    counts["healing"] = healing.heal_pending()  # repairs go ahead of new orders
    if Lease.objects.filter(state=S.QUEUED).exists():
        counts.update(placing.run_schedule_pass(wait=False))
    return counts


def converging_steps() -> list[tuple[str, Any]]:
    """Each converging lease with the step that moves it: the ones whose first step never
    ran (a lost message: nothing was pushed yet) before the ones only waiting on agents,
    oldest first within each."""
    first: list[tuple[str, Any]] = []
    checks: list[tuple[str, Any]] = []
    for lease in Lease.objects.filter(state__in=sorted(states.CONVERGING)).order_by(
            "updated", "id").only("id", "state", "provision_targets"):
        provisioning_ = lease.state == S.PROVISIONING
        if lease.provision_targets:
            checks.append(("check_provisioned" if provisioning_ else "check_released",
                           lease.pk))
        else:
            first.append(("provision" if provisioning_ else "teardown", lease.pk))
    return first + checks


def drive_converging(budget_s: float | None = None) -> dict[str, int]:
    """Re-drive converging leases within a time budget (the rest at the next beat). One
    lease's failure is logged and skipped: it never stops the others being driven."""
    budget = settings.GPUPOOL_RECONCILE_BUDGET_S if budget_s is None else budget_s
    started = time.monotonic()
    driven = failed = 0
    for step, lease_id in converging_steps():
        if time.monotonic() - started > budget:
            break
        try:
            follow = run_step(step, lease_id)
            if follow:
                run_step(follow, lease_id)
        except (DatabaseError, ApplicationError):
            log.exception("reconciler: %s of lease %s failed; next beat again", step,
                          lease_id)
            failed += 1
            continue
        driven += 1
    return {"driven": driven, "step_errors": failed}


def repush_drifted_nodes(budget: int | None = None) -> int:
    """Backstop for a failed push (``access_push`` logs it and records the node in
    ``repair.FAILED``): re-derive the desired state of the nodes whose push failed, and of
    a rotating slice of every node that grants something (a granting lease there, or
    grants in its stored document), and push those whose stored content hash differs
    from the derived one. Unchanged nodes are neither locked nor written.

    Deriving a node costs a handful of queries, so checking every granting node every
    beat was O(fleet) work each 5 s (≈ 40 commits/s with 40 leases; thousands at 10,000
    nodes). The slice (``repair.next_slice``) covers all of them once per
    ``GPUPOOL_REPUSH_SWEEP_S``; a recorded failure is retried at the next beat."""
    candidates = repair.granting_nodes()
    failed = repair.FAILED.take()
    chosen = sorted(set(failed) | set(repair.next_slice(candidates, budget)))
    stored = {row.node_id: row.document or {}
              for row in NodeDesiredState.objects.filter(node_id__in=chosen)}
    nodes = Node.objects.filter(pk__in=chosen).order_by("hostname")
    drifted = [n for n in nodes if desired.node_drifted(n, stored.get(n.pk, {}))]
    pushed: list[str] = []
    for node in drifted:  # one node per transaction, as access_push does
        try:
            with transaction.atomic():
                desired.push_node(node)
        except (DatabaseError, ApplicationError):
            log.exception("re-push to node %s failed; the next beat tries again",
                          node.hostname)
            repair.FAILED.add([node.pk])
            continue
        log.warning("desired state of %s had drifted from its leases: re-pushed",
                    node.hostname)
        pushed.append(str(node.pk))
    if pushed and settings.GPUPOOL_SIMULATED_AGENTS:
        dispatch.simulated_agents_on_commit(pushed)
    return len(pushed)


def simulate_agents(node_ids: list[str]) -> None:
    """The simulated agents of the demo: apply desired state, then the same convergence
    event a real agent's report raises (``fleet.hooks``)."""
    for node in Node.objects.filter(pk__in=node_ids):
        # Applied and committed first: the apply holds the node's desired-state row, which a
        # provisioning step takes after its lease row (the event then takes lease rows).
        fleet.simulate_apply(node=node)
        hooks.node_converged(node.pk)
