"""Thin Celery tasks: IDs in, one orchestration step, the next step on commit."""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache
from django.db import OperationalError, transaction

from portal.core.tasks import durable_task
from portal.leasing import orchestration
from portal.leasing.models import Allocation, Lease
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
    """The simulated agents of the demo: apply desired state, then re-check leases."""
    from portal.fleet import services as fleet
    from portal.inventory.models import Node

    for node in Node.objects.filter(pk__in=node_ids):
        fleet.simulate_apply(node=node)
    check_leases_on(node_ids)


def simulate_agents_on_commit(node_ids: list[str]) -> None:
    simulate_agents.delay(node_ids)


def check_leases_on(node_ids: list[Any]) -> None:
    lease_ids = Allocation.objects.filter(node_id__in=node_ids).values("lease_id")
    for lease in Lease.objects.filter(pk__in=lease_ids,
                                      state__in=[S.PROVISIONING, S.RELEASING]).only("id", "state"):
        step = "check_provisioned" if lease.state == S.PROVISIONING else "check_released"
        STEPS[step](lease.pk)


@durable_task(time_limit=120)
def reconcile() -> dict[str, int]:
    """Beat: re-drive everything in a transitional state (convergence never needs Redis)."""
    return reconcile_once()


def reconcile_once() -> dict[str, int]:
    counts = {"started": orchestration.start_due_reservations(),
              "expired": orchestration.expire_due(),
              "warned": orchestration.warn_expiring()}
    for lease in Lease.objects.filter(state__in=[S.PROVISIONING, S.RELEASING]).only(
            "id", "state", "provision_targets"):
        if lease.state == S.PROVISIONING:
            step = "check_provisioned" if lease.provision_targets else "provision"
        else:
            step = "check_released" if lease.provision_targets else "teardown"
        STEPS[step](lease.pk)
        if step in FOLLOW_UP:
            STEPS[FOLLOW_UP[step]](lease.pk)
    if Lease.objects.filter(state=S.QUEUED).exists():
        counts.update(orchestration.run_schedule_pass())
    return counts


@durable_task(time_limit=60)
def simulate_telemetry() -> int:
    """Demo only: simulated agents report telemetry for nodes with active leases."""
    from portal.leasing.simulation import simulate_telemetry as run

    return run()
