"""Thin Celery tasks: IDs in, one lifecycle step (``portal.leasing.lifecycle``), the next
step queued by name. Imports go tasks → lifecycle only; the lifecycle sends these tasks by
the names in ``lifecycle.dispatch`` (each task declares its name: stable for the beat and
for queued messages)."""

from __future__ import annotations

from django.db import OperationalError

from portal.core.tasks import durable_task
from portal.leasing import simulation
from portal.leasing.lifecycle import dispatch, expiry, placing, reconcile


@durable_task(name=dispatch.SCHEDULE_PASS, time_limit=60)
def schedule_pass() -> dict[str, int]:
    dispatch.schedule_pass_started()
    return placing.run_schedule_pass()


@durable_task(name=dispatch.LEASE_STEP, time_limit=60, autoretry_for=(OperationalError,),
              retry_backoff=0.5, retry_backoff_max=10, retry_jitter=True, max_retries=8)
def lease_step(step: str, lease_id: str) -> None:
    """One idempotent step; a transient database error (a deadlock victim, a dropped
    connection) rolled the step back whole, so it is simply run again."""
    follow = reconcile.run_step(step, lease_id)
    if follow:
        dispatch.step(follow, lease_id)


@durable_task(name=dispatch.SIMULATE_AGENTS, time_limit=60)
def simulate_agents(node_ids: list[str]) -> None:
    """The demo's simulated agents (``lifecycle.reconcile.simulate_agents``)."""
    reconcile.simulate_agents(node_ids)


@durable_task(name=dispatch.EXPIRE_LEASE, time_limit=60, autoretry_for=(OperationalError,),
              retry_backoff=0.5, max_retries=8)
def expire_lease(lease_id: str) -> None:
    """At the lease's end (an ETA task): begin its release now, not at the next beat."""
    end = expiry.expire_lease(lease_id)
    if end is not None:  # extended meanwhile, or the ETA fired a little early
        dispatch.expiry(lease_id, end)


@durable_task(name=dispatch.RECONCILE, time_limit=120)
def reconcile_leases() -> dict[str, int]:
    """Beat: re-drive everything in a transitional state (convergence never needs Redis)."""
    return reconcile.reconcile_once()


@durable_task(name=dispatch.SIMULATE_TELEMETRY, time_limit=60)
def simulate_telemetry() -> int:
    """Demo only: simulated agents report telemetry for nodes with active leases."""
    return simulation.simulate_telemetry()
