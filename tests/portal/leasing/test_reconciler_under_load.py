"""The reconciler at 1,000 nodes (issue 27's healing benchmark stalled in its fill): one
reconciler at a time (freed the moment its worker dies), a bounded beat, one bad lease never stopping the rest, its pass
never waiting behind another, and beat messages that expire instead of piling up."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from portal.leasing import desired
from portal.leasing.lifecycle import placing, provisioning, reconcile
from portal.leasing.models import Lease
from portal.leasing.models import LeaseState as S
from tests.portal.leasing.test_handover import order, state


def _placed(pool: dict[str, Any], n: int) -> list[Lease]:
    leases = [order(pool, gpu_count=4) for _ in range(n)]  # quota 16
    placing.run_schedule_pass()
    assert all(state(lease) == S.PROVISIONING for lease in leases)
    return leases


def _other_worker() -> psycopg.Connection[Any]:
    """A second database session, as another worker's would be."""
    d = connection.settings_dict
    return psycopg.connect(dbname=d["NAME"], user=d["USER"], host=d["HOST"] or None,
                           port=d["PORT"] or None, password=d["PASSWORD"] or None,
                           autocommit=True)


def test_a_reconciler_running_in_another_worker_makes_the_next_beat_return_at_once(
        pool: dict[str, Any]) -> None:
    lease, = _placed(pool, 1)
    other = _other_worker()
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [reconcile.RECONCILE_LOCK])
        assert reconcile.reconcile_once() == {"skipped": 1}
        lease.refresh_from_db()
        assert lease.provision_targets == {}  # nothing was driven
    finally:
        other.close()  # that worker is killed: the server drops its lock with its session
    counts = reconcile.reconcile_once()
    assert counts["driven"] == 1
    lease.refresh_from_db()
    assert lease.provision_targets  # pushed
    probe = _other_worker()
    try:  # released after the beat: another worker's reconciler may take it now
        assert probe.execute("SELECT pg_try_advisory_lock(%s)",
                             [reconcile.RECONCILE_LOCK]).fetchone() == (True,)
    finally:
        probe.close()


def test_one_lease_whose_step_fails_does_not_stop_the_others(
        pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    bad, *good = _placed(pool, 3)
    real = provisioning.provision  # one lease a step here (not the batch)

    def provision(lease_id: object) -> None:
        if str(lease_id) == str(bad.pk):
            raise DatabaseError("deadlock detected")
        real(lease_id)
    monkeypatch.setitem(reconcile.STEPS, "provision", provision)
    counts = reconcile.drive_converging()
    assert counts == {"driven": 2, "step_errors": 1}
    for lease in good:
        lease.refresh_from_db()
        assert lease.provision_targets
    bad.refresh_from_db()
    assert bad.provision_targets == {} and bad.state == S.PROVISIONING  # next beat again


def test_leases_whose_first_step_never_ran_come_before_those_waiting_on_agents(
        pool: dict[str, Any]) -> None:
    waiting, lost = _placed(pool, 2)
    provisioning.provision(waiting.pk)  # pushed: now only waits on its agent
    steps = reconcile.converging_steps()
    assert steps == [("provision", lost.pk), ("check_provisioned", waiting.pk)]


def test_a_spent_budget_leaves_the_rest_to_the_next_beat(pool: dict[str, Any]) -> None:
    leases = _placed(pool, 2)
    assert reconcile.drive_converging(budget_s=-1) == {"driven": 0, "step_errors": 0}
    for lease in leases:
        lease.refresh_from_db()
        assert lease.provision_targets == {}
    assert reconcile.drive_converging(budget_s=60)["driven"] == 2


@pytest.mark.services("postgres")
def test_the_reconcilers_pass_does_not_wait_behind_a_running_pass(
        pool_tx: dict[str, Any]) -> None:
    lease = order(pool_tx)
    held, release = threading.Event(), threading.Event()

    def running_pass() -> None:  # another worker's pass, holding the single-flight lock
        try:
            with transaction.atomic():
                placing.single_flight()
                held.set()
                release.wait(10)
        finally:
            connection.close()
    other = threading.Thread(target=running_pass)
    other.start()
    try:
        assert held.wait(10)
        assert placing.run_schedule_pass(wait=False) == {"queued": 0, "placed": 0, "busy": 1}
        assert state(lease) == S.QUEUED  # left to the pass that holds the lock
    finally:
        release.set()
        other.join()
    assert placing.run_schedule_pass(wait=False)["placed"] == 1


def test_beat_messages_expire_after_one_period_instead_of_queueing_up() -> None:
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert entry["options"]["expires"] == entry["schedule"], name


def test_a_provisioning_step_pushes_every_placed_lease_under_one_partition_map(
        pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    first, *rest = _placed(pool, 3)
    derived: list[int] = []
    real = desired.push_fabric

    def push_fabric() -> int:
        derived.append(1)
        return real()
    monkeypatch.setattr(desired, "push_fabric", push_fabric)
    reconcile.run_step("provision", first.pk)
    assert len(derived) == 1  # was one derivation of the whole fleet's map per lease
    for lease in (first, *rest):
        lease.refresh_from_db()
        assert lease.provision_targets
    for lease in rest:  # their own queued steps find nothing to do: no map derived
        reconcile.run_step("provision", lease.pk)
    assert len(derived) == 1


def test_a_batch_cut_short_leaves_the_rest_to_the_reconciler(
        pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    first, second, third = _placed(pool, 3)
    real = provisioning.provision

    def provision(lease_id: object, **kw: Any) -> bool:
        if str(lease_id) == str(second.pk):
            raise DatabaseError("worker lost")
        return real(lease_id, **kw)
    monkeypatch.setattr(provisioning, "provision", provision)
    with pytest.raises(DatabaseError):
        provisioning.provision_batch(first.pk)
    monkeypatch.setattr(provisioning, "provision", real)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.provision_targets and not second.provision_targets
    assert reconcile.drive_converging()["step_errors"] == 0
    for lease in (second, third):
        lease.refresh_from_db()
        assert lease.provision_targets


def test_control_sweeps_have_a_queue_of_their_own_that_every_worker_consumes() -> None:
    from portal.celery import app

    route = app.amqp.router.route
    assert route({}, "portal.leasing.tasks.reconcile")["queue"].name == "control"
    assert route({}, "portal.fleet.tasks.fleet_health_sweep")["queue"].name == "control"
    assert route({}, "portal.leasing.tasks.lease_step")["queue"].name == "celery"
    # a worker started without -Q (the shipped unit, the Containerfile) consumes both
    assert {"celery", "control"} <= {q.name for q in app.amqp.queues.values()}


def test_the_reconciler_lock_does_not_ride_on_djangos_connection_regression(
        pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock was a session lock on Django's connection: where that connection outlives
    the beat (the psycopg pool keeps it open; PgBouncer's transaction pooling runs the
    unlock on another server connection) a failed or misrouted unlock left it held for
    good, and every reconciler after skipped. Now it lives in a transaction of the
    reconciler's own connection: never Django's backend, and gone after the beat while
    Django's connection stays open."""
    django_pid = connection.cursor().connection.info.backend_pid
    seen: list[tuple[int, ...]] = []

    def holders() -> list[int]:
        probe = _other_worker()
        try:
            return [pid for pid, in probe.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = %s "
                "AND granted", [reconcile.RECONCILE_LOCK & 0xFFFFFFFF]).fetchall()]
        finally:
            probe.close()

    real = reconcile._reconcile
    monkeypatch.setattr(reconcile, "_reconcile",
                        lambda: (seen.append(tuple(holders())), real())[1])
    assert "skipped" not in reconcile.reconcile_once()
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0] != django_pid
    assert connection.cursor().connection.info.backend_pid == django_pid  # still open
    assert holders() == []
