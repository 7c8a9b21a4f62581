"""The Celery work the lifecycle asks for, sent by task name after commit.

The lifecycle never imports ``portal.leasing.tasks`` (that closed an import cycle; ADR
0130): it names the task and the broker carries it. The names are the tasks' registered
names (``tasks.py`` declares each with ``name=`` one of these), stable for the beat
schedule and queued messages; tests/portal/leasing/test_dispatch.py checks every name here
is a registered task. A send that fails (Redis down) is logged: the state it follows is
committed and the reconciler re-drives it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import transaction

from portal.celery import app
from portal.core import clock
from portal.leasing.lifecycle import timing

log = logging.getLogger(__name__)

SCHEDULE_PASS = "portal.leasing.tasks.schedule_pass"
LEASE_STEP = "portal.leasing.tasks.lease_step"
EXPIRE_LEASE = "portal.leasing.tasks.expire_lease"
SIMULATE_AGENTS = "portal.leasing.tasks.simulate_agents"
RECONCILE = "portal.leasing.tasks.reconcile"
SIMULATE_TELEMETRY = "portal.leasing.tasks.simulate_telemetry"
# Every name this module sends (RECONCILE and SIMULATE_TELEMETRY are sent by the beat).
NAMES = (SCHEDULE_PASS, LEASE_STEP, EXPIRE_LEASE, SIMULATE_AGENTS, RECONCILE,
         SIMULATE_TELEMETRY)
PENDING_KEY = "gpupool:schedule-pending"


def send(name: str, args: Sequence[Any] = (), *, eta: datetime | None = None) -> None:
    """Queue task ``name`` now (raises if the broker is unreachable)."""
    if eta is None:
        app.send_task(name, args=list(args))
    else:
        app.send_task(name, args=list(args), eta=eta)


def step(step_name: str, lease_id: object) -> None:
    """Queue one lease step now; a lost broker only delays it (the reconciler)."""
    try:
        send(LEASE_STEP, (step_name, str(lease_id)))
    except Exception:  # Redis down: the state is committed; the reconciler re-drives it
        log.warning("could not enqueue %s for %s", step_name, lease_id, exc_info=True)


def step_on_commit(step_name: str, lease_id: object) -> None:
    lease = str(lease_id)
    transaction.on_commit(lambda: step(step_name, lease))


def steps_on_commit(step_name: str, lease_ids: list[object]) -> None:
    """The same step for several leases after commit (e.g. those waiting on freed GPUs)."""
    ids = [str(x) for x in lease_ids]

    def fire() -> None:
        for lease_id in ids:
            step(step_name, lease_id)
    if ids:
        transaction.on_commit(fire)


def schedule_pass_on_commit() -> None:
    """One scheduling pass after commit (one pending at a time: the cache marker)."""
    def fire() -> None:
        try:
            if cache.add(PENDING_KEY, 1, timeout=30):
                send(SCHEDULE_PASS)
        except Exception:  # Redis down: the change is committed; the reconciler schedules
            log.warning("could not request a scheduling pass", exc_info=True)
    transaction.on_commit(fire)


def schedule_pass_started() -> None:
    """A pass is starting: an order committed after this point triggers another pass, one
    committed before is in this one."""
    cache.delete(PENDING_KEY)


def simulated_agents_on_commit(node_ids: list[str]) -> None:
    """The demo's simulated agents apply the nodes' new desired state after commit."""
    ids = [str(x) for x in node_ids]

    def fire() -> None:
        try:
            send(SIMULATE_AGENTS, (ids,))
        except Exception:  # the reconciler re-pushes and the simulation follows
            log.warning("could not queue the simulated agents", exc_info=True)
    transaction.on_commit(fire)


def expiry(lease_id: object, end_at: datetime) -> None:
    """Send ``expire_lease`` for ``end_at`` if it is near enough (once per lease and end);
    later ends are sent by the beat (``expiry.schedule_near_expiries``) as they near."""
    left = end_at - clock.now()
    horizon = timing.expiry_horizon()
    if left > horizon:
        return
    key = f"gpupool:expiry:{lease_id}:{end_at.timestamp()}"
    try:
        if left.total_seconds() > 1 and not cache.add(
                key, 1, timeout=int(horizon.total_seconds()) + 60):
            return
        send(EXPIRE_LEASE, (str(lease_id),), eta=max(end_at, clock.now()))
    except Exception:  # Redis down: the beat's ``expire_due`` ends it a little later
        log.warning("could not schedule the expiry of %s", lease_id, exc_info=True)


def expiry_on_commit(lease_id: object, end_at: datetime) -> None:
    """An ETA task ends the lease at ``end_at`` (the beat's ``expire_due`` backstops)."""
    transaction.on_commit(lambda: expiry(str(lease_id), end_at))
