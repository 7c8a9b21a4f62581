"""Thin Celery tasks: IDs in, one orchestration step, the next step on commit."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, OperationalError, transaction

from portal.core import clock
from portal.core.errors import ApplicationError
from portal.core.tasks import durable_task
from portal.leasing import orchestration, states
from portal.leasing.models import Lease
from portal.leasing.models import LeaseState as S

log = logging.getLogger(__name__)
PENDING_KEY = "gpupool:schedule-pending"
STEPS = {
    "provision": orchestration.provision,
    "check_provisioned": orchestration.check_provisioned,
    "teardown": orchestration.teardown,
    "check_released": orchestration.check_released,
}
FOLLOW_UP = {"provision": "check_provisioned", "teardown": "check_released"}


@durable_task(time_limit=60)
def schedule_pass() -> dict[str, int]:
    # Delete the marker before reading the queue: an order committed after this point
    # triggers another pass, one committed before is in this one.
    cache.delete(PENDING_KEY)
    return orchestration.run_schedule_pass()


def request_schedule_pass_on_commit() -> None:
    def fire() -> None:
        try:
            if cache.add(PENDING_KEY, 1, timeout=30):
                schedule_pass.delay()
        except Exception:  # Redis down: the change is committed; the reconciler schedules
            log.warning("could not request a scheduling pass", exc_info=True)
    transaction.on_commit(fire)


@durable_task(time_limit=60, autoretry_for=(OperationalError,), retry_backoff=0.5,
              retry_backoff_max=10, retry_jitter=True, max_retries=8)
def lease_step(step: str, lease_id: str) -> None:
    """One idempotent step; a transient database error (a deadlock victim, a dropped
    connection) rolled the step back whole, so it is simply run again."""
    STEPS[step](lease_id)
    if step in FOLLOW_UP:
        lease_step.delay(FOLLOW_UP[step], lease_id)


def enqueue_step(step: str, lease_id: str) -> None:
    try:
        lease_step.delay(step, lease_id)
    except Exception:  # Redis down: the state is committed; the reconciler re-drives it
        log.warning("could not enqueue %s for %s", step, lease_id, exc_info=True)


@durable_task(time_limit=60)
def simulate_agents(node_ids: list[str]) -> None:
    """The simulated agents of the demo: apply desired state, then the same convergence
    event a real agent's report raises (``fleet.hooks``)."""
    from portal.fleet import hooks
    from portal.fleet import services as fleet
    from portal.inventory.models import Node

    for node in Node.objects.filter(pk__in=node_ids):
        # Applied and committed first: the apply holds the node's desired-state row, which a
        # provisioning step takes after its lease row (the event then takes lease rows).
        fleet.simulate_apply(node=node)
        hooks.node_converged(node.pk)


def simulate_agents_on_commit(node_ids: list[str]) -> None:
    simulate_agents.delay(node_ids)


def check_leases_on(node_ids: list[Any]) -> None:
    """What a convergence event on each node does (tests and the demo drive it)."""
    for node_id in node_ids:
        orchestration.node_converged(node_id)


# --- expiry on time -----------------------------------------------------------------------

def expiry_horizon() -> timedelta:
    """ETA tasks are only sent this far ahead: below the broker's visibility timeout, so a
    waiting task is not redelivered; the beat sends the later ones as their end nears."""
    return timedelta(seconds=float(getattr(settings, "GPUPOOL_EXPIRY_ETA_HORIZON_S", 1800)))


@durable_task(time_limit=60, autoretry_for=(OperationalError,), retry_backoff=0.5,
              max_retries=8)
def expire_lease(lease_id: str) -> None:
    """At the lease's end (an ETA task): begin its release now, not at the next beat."""
    end = orchestration.expire_lease(lease_id)
    if end is not None:  # extended meanwhile, or the ETA fired a little early
        schedule_expiry(lease_id, end)


def schedule_expiry(lease_id: str, end_at: datetime) -> None:
    """Send ``expire_lease`` for ``end_at`` if it is near enough (once per lease and end)."""
    left = end_at - clock.now()
    if left > expiry_horizon():
        return
    key = f"gpupool:expiry:{lease_id}:{end_at.timestamp()}"
    try:
        if left.total_seconds() > 1 and not cache.add(key, 1, timeout=int(
                expiry_horizon().total_seconds()) + 60):
            return
        expire_lease.apply_async((lease_id,), eta=max(end_at, clock.now()))
    except Exception:  # Redis down: the beat's ``expire_due`` ends it a little later
        log.warning("could not schedule the expiry of %s", lease_id, exc_info=True)


def schedule_expiry_on_commit(lease_id: object, end_at: datetime) -> None:
    transaction.on_commit(lambda: schedule_expiry(str(lease_id), end_at))


def schedule_near_expiries() -> int:
    """Beat: ETA tasks for the active leases that end within the horizon."""
    due = Lease.objects.filter(state=S.ACTIVE,
                               end_at__lte=clock.now() + expiry_horizon()).values_list(
        "pk", "end_at")
    for lease_id, end_at in due:
        schedule_expiry(str(lease_id), end_at)
    return len(due)


@durable_task(time_limit=120)
def reconcile() -> dict[str, int]:
    """Beat: re-drive everything in a transitional state (convergence never needs Redis)."""
    return reconcile_once()


def reconcile_once() -> dict[str, int]:
    # Expiry first: a reservation due now must find the lease it follows already releasing.
    counts = {"expired": orchestration.expire_due()}
    counts["started"] = orchestration.start_due_reservations()
    counts["warned"] = orchestration.warn_expiring()
    counts["expiries_scheduled"] = schedule_near_expiries()
    for lease in Lease.objects.filter(state__in=sorted(states.CONVERGING)).only(
            "id", "state", "provision_targets"):
        if lease.state == S.PROVISIONING:
            step = "check_provisioned" if lease.provision_targets else "provision"
        else:
            step = "check_released" if lease.provision_targets else "teardown"
        STEPS[step](lease.pk)
        if step in FOLLOW_UP:
            STEPS[FOLLOW_UP[step]](lease.pk)
    counts["repushed"] = repush_drifted_nodes()
    if Lease.objects.filter(state=S.QUEUED).exists():
        counts.update(orchestration.run_schedule_pass())
    return counts


def repush_drifted_nodes() -> int:
    """Backstop for a failed push (``access_push`` only logs one): re-derive the desired
    state of every node that grants something (a granting lease there, or grants in its
    stored document) and push those whose stored content hash differs from the derived
    one. Unchanged nodes are neither locked nor written."""
    from portal.fleet.models import NodeDesiredState
    from portal.inventory.models import Node
    from portal.leasing import desired
    from portal.leasing.models import Allocation

    granting = Allocation.objects.filter(live=True, lease__state__in=desired.GRANTING)
    stored = {row.node_id: row.document or {} for row in NodeDesiredState.objects.all()}
    with_grants = [pk for pk, doc in stored.items() if doc.get("access_grants")]
    nodes = Node.objects.filter(pk__in=set(granting.values_list("node_id", flat=True))
                                | set(with_grants)).order_by("hostname")
    drifted = [n for n in nodes if desired.node_drifted(n, stored.get(n.pk, {}))]
    pushed: list[str] = []
    for node in drifted:  # one node per transaction, as access_push does
        try:
            with transaction.atomic():
                desired.push_node(node)
        except (DatabaseError, ApplicationError):
            log.exception("re-push to node %s failed; the next beat tries again",
                          node.hostname)
            continue
        log.warning("desired state of %s had drifted from its leases: re-pushed",
                    node.hostname)
        pushed.append(str(node.pk))
    if pushed and settings.GPUPOOL_SIMULATED_AGENTS:
        transaction.on_commit(lambda: simulate_agents_on_commit(pushed))
    return len(pushed)


@durable_task(time_limit=60)
def simulate_telemetry() -> int:
    """Demo only: simulated agents report telemetry for nodes with active leases."""
    from portal.leasing.simulation import simulate_telemetry as run

    return run()
