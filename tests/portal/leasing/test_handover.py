"""Issues 12 and 10.3: convergence is an event, GPU handover is fenced, expiry is on time
and comes before reservations, silent nodes are not offered.

Every step here is called directly (no reconciler, no worker): what moves a lease is the
node's report going through the real ingestion service.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from portal.core import clock
from portal.fleet import protocol
from portal.fleet.models import FabricDesiredState, NodeDesiredState, NodeObservedState
from portal.fleet.services import agent_for_node
from portal.fleet.services.ingest import report_ingest
from portal.inventory.models import Gpu, HcaPort, Node
from portal.leasing import allocation, desired, services, tasks
from portal.leasing.lifecycle import (
    dispatch,
    expiry,
    placing,
    provisioning,
    reconcile,
    releasing,
    timing,
)
from portal.leasing.models import Allocation, Lease, LeaseEvent
from portal.leasing.models import LeaseState as S
from portal.leasing.simulation import report_for

pytestmark = pytest.mark.services("postgres")


def order(pool: dict[str, Any], who: str = "alice", tenant: str = "a", **kw: Any) -> Lease:
    spec = services.OrderSpec(**{"models": ["H100"], "gpu_count": 8,
                                 "duration_hours": Decimal(2), **kw})
    return services.order_create(actor=pool[who], tenant=pool[tenant], spec=spec)


def node_of(lease: Lease) -> Node:
    return Node.objects.get(pk=Allocation.objects.filter(lease=lease).values("node_id")[:1])


def generation(node: Node) -> int:
    return int(NodeDesiredState.objects.get(node=node).generation)


def agent_reports(node: Node, applied: int) -> dict[str, Any]:
    """The node's agent reports that it applied ``applied``, through the real ingest."""
    agent = agent_for_node(node=node)
    body = report_for(node, list(Gpu.objects.filter(node=node).order_by("index")),
                      list(HcaPort.objects.filter(node=node)), set(), agent.last_seq + 1,
                      clock.now(), applied, agent.agent_id)
    assert protocol.validate_report(body) == []
    return report_ingest(agent=agent, body=body)


def granted(node: Node) -> dict[str, list[int]]:
    doc = NodeDesiredState.objects.get(node=node).document
    return {g["lease_id"]: sorted(g["gpu_indices"]) for g in doc.get("access_grants", [])}


def fabric_tenants() -> set[str]:
    doc = FabricDesiredState.objects.get(name="default").document
    return {p["name"] for p in doc.get("partitions", [])}


def grant_id(lease: Lease) -> str:
    return f"ls_{lease.pk.hex[:16]}"


def state(lease: Lease) -> str:
    lease.refresh_from_db()
    return lease.state


def placed_and_pushed(lease: Lease) -> Node:
    placing.run_schedule_pass()
    assert state(lease) == S.PROVISIONING
    provisioning.provision(lease.pk)
    return node_of(lease)


def test_converged_report_activates_lease_without_reconciler(pool: dict[str, Any]) -> None:
    lease = order(pool)
    node = placed_and_pushed(lease)
    agent_reports(node, generation(node) - 1)  # not there yet
    assert state(lease) == S.PROVISIONING
    agent_reports(node, generation(node))
    assert state(lease) == S.ACTIVE  # in the report's own call and transaction
    services.lease_release(actor=pool["alice"], lease=lease)
    releasing.teardown(lease.pk)
    agent_reports(node, generation(node))
    assert state(lease) == S.ENDED
    assert not Allocation.objects.filter(lease=lease, live=True).exists()


def _cordon_all_but(node: Node) -> None:
    Node.objects.exclude(pk=node.pk).update(state=Node.State.DRAINED)


def _activate(lease: Lease) -> Node:
    node = placed_and_pushed(lease)
    agent_reports(node, generation(node))
    provisioning.check_provisioned(lease.pk)  # (the report did it already: a no-op)
    assert state(lease) == S.ACTIVE
    return node


def _active(pool: dict[str, Any]) -> tuple[Lease, Node]:
    first = order(pool)
    return first, _activate(first)


def _back_to_back(pool: dict[str, Any]) -> tuple[Lease, Node, Lease]:
    """On one node: tenant a's lease active now for 2 h; tenant b's reservation of the same
    8 GPUs for the hour after it (reserved first, as a calendar booking would be)."""
    node = Node.objects.order_by("hostname").first()
    assert node is not None
    _cordon_all_but(node)
    second = order(pool, "bob", "b", start_at=clock.now() + timedelta(hours=2),
                   duration_hours=Decimal(1))
    placing.run_schedule_pass()
    assert state(second) == S.SCHEDULED and node_of(second) == node
    first = order(pool)
    assert _activate(first) == node and first.end_at == second.start_at
    return first, node, second


def test_next_lease_waits_for_previous_teardown(pool: dict[str, Any]) -> None:
    first, node, second = _back_to_back(pool)
    clock.advance(first.end_at - clock.now())
    # The reservation's start comes first here (the worst order): it is provisioned, but
    # its GPUs are not granted while the previous tenant is on them.
    assert provisioning.start_due_reservations() == 1
    provisioning.provision(second.pk)
    assert grant_id(second) not in granted(node)
    assert granted(node) == {grant_id(first): list(range(8))}
    assert fabric_tenants() == {"tenant_a"}  # nor is b's partition on the node's ports
    agent_reports(node, generation(node))
    provisioning.check_provisioned(second.pk)
    assert state(second) == S.PROVISIONING
    # The previous lease expires; its teardown is pushed; the node has not applied it yet.
    assert expiry.expire_due() == 1
    releasing.teardown(first.pk)
    teardown_generation = generation(node)
    assert granted(node) == {}
    provisioning.check_provisioned(second.pk)
    assert state(second) == S.PROVISIONING
    # The node reports the teardown: the first lease ends and, in the same call, the GPUs
    # are granted to the next one (which becomes active once that is applied).
    agent_reports(node, teardown_generation)
    assert state(first) == S.EXPIRED
    assert granted(node) == {grant_id(second): list(range(8))}
    assert fabric_tenants() == {"tenant_b"}
    assert generation(node) > teardown_generation and state(second) == S.PROVISIONING
    agent_reports(node, generation(node))
    assert state(second) == S.ACTIVE
    first.refresh_from_db()
    assert second.active_at is not None and first.state == S.EXPIRED


def test_preemptor_waits_for_the_victims_teardown(pool: dict[str, Any], settings: Any) -> None:
    settings.GPUPOOL_PREEMPT_GRACE_S = 0
    spot, node = _active(pool)
    Lease.objects.filter(pk=spot.pk).update(priority="spot")
    _cordon_all_but(node)
    clock.advance(timedelta(minutes=10))
    boss = order(pool, "bob", "b")
    placing.run_schedule_pass()
    assert state(spot) == S.RELEASING and state(boss) == S.PROVISIONING
    provisioning.provision(boss.pk)
    releasing.teardown(spot.pk)
    assert grant_id(boss) not in granted(node)
    assert Allocation.objects.filter(lease=spot, live=True).count() == 64  # still held
    agent_reports(node, generation(node))  # the teardown: the spot lease ends, boss pushed
    assert state(spot) == S.PREEMPTED and state(boss) == S.PROVISIONING
    assert granted(node) == {grant_id(boss): list(range(8))}
    agent_reports(node, generation(node))
    assert state(boss) == S.ACTIVE


def test_teardown_never_observed_quarantines_gpus_and_moves_next_lease(
        pool: dict[str, Any], settings: Any) -> None:
    settings.GPUPOOL_PROVISION_TIMEOUT_S = 3600
    first, node, second = _back_to_back(pool)
    clock.advance(first.end_at - clock.now())
    expiry.expire_due()
    releasing.teardown(first.pk)
    provisioning.start_due_reservations()
    provisioning.provision(second.pk)
    Node.objects.exclude(pk=node.pk).update(state=Node.State.READY)
    clock.advance(timing.release_timeout() + timedelta(seconds=1))
    releasing.check_released(first.pk)  # the node never reported the teardown
    assert state(first) == S.EXPIRED
    assert set(Gpu.objects.filter(node=node).values_list("health", flat=True)) == {
        Gpu.Health.QUARANTINED}
    assert state(second) == S.QUEUED
    assert not Allocation.objects.filter(lease=second, live=True).exists()
    placing.run_schedule_pass()
    provisioning.provision(second.pk)
    assert state(second) == S.PROVISIONING and node_of_live(second) != node
    assert granted(node) == {}
    assert not LeaseEvent.objects.filter(lease=second, to_state=S.ACTIVE).exists()


def node_of_live(lease: Lease) -> Node:
    return Node.objects.get(pk=Allocation.objects.filter(lease=lease, live=True)
                            .values("node_id")[:1])


def test_expiry_runs_before_due_reservation_starts(pool: dict[str, Any]) -> None:
    first, node, second = _back_to_back(pool)
    clock.advance(first.end_at - clock.now())
    reconcile.reconcile_once()
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == S.RELEASING and second.state == S.PROVISIONING
    released = LeaseEvent.objects.get(lease=first, to_state=S.RELEASING)
    started = LeaseEvent.objects.get(lease=second, to_state=S.PROVISIONING)
    assert released.pk < started.pk  # expiry first, in the one pass
    assert grant_id(second) not in granted(node)


def test_expiry_is_on_time(pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                           run_on_commit: None, django_capture_on_commit_callbacks: Any,
                           settings: Any) -> None:
    settings.GPUPOOL_EXPIRY_ETA_HORIZON_S = 3 * 3600
    sent: list[tuple[tuple[str, ...], datetime]] = []
    send = dispatch.send

    def sent_by_name(name: str, args: Any = (), *, eta: datetime | None = None) -> None:
        if name != dispatch.EXPIRE_LEASE:
            return send(name, args, eta=eta)
        sent.append((tuple(args), eta))  # type: ignore[arg-type]
        return None
    monkeypatch.setattr(dispatch, "send", sent_by_name)
    lease = order(pool)
    node = placed_and_pushed(lease)
    with django_capture_on_commit_callbacks(execute=True):
        agent_reports(node, generation(node))
    assert state(lease) == S.ACTIVE
    assert sent == [((str(lease.pk),), lease.end_at)]  # an ETA task at the very end
    clock.advance(lease.end_at - clock.now())
    tasks.expire_lease(str(lease.pk))  # what the worker runs at the ETA
    lease.refresh_from_db()
    assert lease.state == S.RELEASING and lease.ended_at == lease.end_at
    # Extending moves the ETA: a new task for the new end; the old one finds nothing due.
    other = order(pool)
    other_node = placed_and_pushed(other)
    with django_capture_on_commit_callbacks(execute=True):
        agent_reports(other_node, generation(other_node))
        services.lease_extend(actor=pool["alice"], lease=other,
                              end_at=other.end_at + timedelta(minutes=30))
    other.refresh_from_db()
    assert sent[-1] == ((str(other.pk),), other.end_at)


def test_scheduler_skips_unreachable_nodes(pool: dict[str, Any], settings: Any) -> None:
    settings.GPUPOOL_SIMULATED_AGENTS = False
    settings.GPUPOOL_AGENT_UNREACHABLE_AFTER_S = 30
    nodes = list(Node.objects.order_by("hostname"))
    fresh, stale = nodes[0], nodes[1]
    Node.objects.update(last_heartbeat=None)  # two never reported
    Node.objects.filter(pk=fresh.pk).update(last_heartbeat=clock.now())
    Node.objects.filter(pk=stale.pk).update(last_heartbeat=clock.now() - timedelta(seconds=31))
    offered = {n.name for n in allocation.snapshot().nodes if n.state.value == "ready"}
    assert offered == {fresh.hostname}
    lease = order(pool, gpu_count=8)
    other = order(pool, "bob", "b", gpu_count=8)
    placing.run_schedule_pass()
    assert {state(lease), state(other)} == {S.PROVISIONING, S.QUEUED}
    placed = lease if lease.state == S.PROVISIONING else other
    assert node_of(placed) == fresh
    settings.GPUPOOL_SIMULATED_AGENTS = True  # the demo's agents always count as reachable
    assert all(n.state.value == "ready" for n in allocation.snapshot().nodes)


def test_simulated_agents_raise_the_same_convergence_event(
        pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from portal.fleet import hooks

    seen: list[int] = []
    monkeypatch.setattr(hooks, "_callbacks", [seen.append, *hooks._callbacks])
    lease = order(pool)
    node = placed_and_pushed(lease)
    tasks.simulate_agents([node.pk])  # what the demo's worker runs after a push
    assert seen == [node.pk] and state(lease) == S.ACTIVE


def test_failing_convergence_callback_keeps_the_report(
        pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import OperationalError

    from portal.fleet import hooks
    from portal.fleet.models import NodeObservedState

    def deadlocked(node_id: int) -> None:
        Lease.objects.update(name="half-done")  # undone with its savepoint
        raise OperationalError("deadlock detected")

    monkeypatch.setattr(hooks, "_callbacks", [deadlocked])
    lease = order(pool)
    node = placed_and_pushed(lease)
    assert agent_reports(node, generation(node))["status"] == "accepted"
    assert NodeObservedState.objects.get(node=node).generation_applied == generation(node)
    lease.refresh_from_db()
    assert lease.state == S.PROVISIONING and lease.name == ""
    reconcile.reconcile_once()  # the backstop
    assert state(lease) == S.ACTIVE


def test_fleet_does_not_import_leasing() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "portal" / "fleet"
    bad = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}: {n}" for n in names if n.startswith("portal.leasing")]
    assert bad == []


def test_handover_push_already_applied_activates_at_once(pool: dict[str, Any]) -> None:
    """The fence cleared between the fence read and the push: the push granted the GPUs
    and the node applied it; the check after the teardown must not wait for another
    report (none would come: nothing changes on the node)."""
    first, node, second = _back_to_back(pool)
    clock.advance(first.end_at - clock.now())
    expiry.expire_due()
    releasing.teardown(first.pk)
    provisioning.start_due_reservations()
    provisioning.provision(second.pk)
    Allocation.objects.filter(lease=first).update(live=False)  # as if it finished meanwhile
    Lease.objects.filter(pk=first.pk).update(state=S.EXPIRED)
    gen = desired.push_node(node)  # the grant, as a later push would write
    assert grant_id(second) in granted(node)
    agent_reports(node, gen)  # applied; the event sees the lease still marked pending
    assert state(second) == S.ACTIVE


def test_teardown_committing_between_fence_read_and_push_cannot_bypass_the_fence(
        pool_tx: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers, two connections, the worst interleaving: B's provisioning reads its
    fence (A still on the GPUs), then A's finish commits, then B's push runs and sees the
    GPUs free. B was marked pending from the earlier read, so it is not activated on that
    push's generation without checking again; it becomes ACTIVE only after the node
    applied a push made once A was gone."""
    import threading

    from django.db import connection

    from portal.leasing import handover

    first, node, second = _back_to_back(pool_tx)
    clock.advance(first.end_at - clock.now())
    expiry.expire_due()
    releasing.teardown(first.pk)
    agent_reports(node, generation(node) - 1)  # the node has not applied the teardown
    provisioning.start_due_reservations()
    read, finished = threading.Event(), threading.Event()
    real = handover.is_fenced

    def is_fenced_then_pause(lease: Lease) -> bool:
        fenced = real(lease)
        if lease.pk == second.pk and not read.is_set():
            read.set()
            assert finished.wait(30)
        return fenced

    def finish_first() -> None:
        try:
            assert read.wait(30)
            NodeObservedState.objects.filter(node=node).update(
                generation_applied=generation(node))  # the teardown applied (no event)
            releasing.check_released(first.pk)  # another worker's step: commits
        finally:
            finished.set()
            connection.close()

    monkeypatch.setattr(handover, "is_fenced", is_fenced_then_pause)
    other = threading.Thread(target=finish_first)
    other.start()
    provisioning.provision(second.pk)
    other.join()
    assert state(first) == S.EXPIRED
    second.refresh_from_db()
    assert second.handover_pending  # read before the push: stricter than the push's view
    assert granted(node) == {grant_id(second): list(range(8))}  # the push saw A gone
    agent_reports(node, generation(node))
    assert state(second) == S.ACTIVE


def test_timed_out_provisioning_fences_its_slots_until_the_removal_is_applied(
        pool: dict[str, Any]) -> None:
    """The node applied the first lease's grant, but the fabric never caught up, so it
    timed out and went back to the queue (its slots freed at once). The next lease on
    those GPUs must wait until the node applied the push that removed that grant."""
    node = Node.objects.order_by("hostname").first()
    assert node is not None
    _cordon_all_but(node)
    first = order(pool)
    assert placed_and_pushed(first) == node
    body = report_for(node, list(Gpu.objects.filter(node=node)), [], set(),
                      agent_for_node(node=node).last_seq + 1, clock.now(), generation(node),
                      agent_for_node(node=node).agent_id)
    body["observed"]["partitions"] = [{"device": "mlx5_0", "port": 1, "in_sync": False,
                                       "pkeys": ["0xffff"]}]  # grant applied, P_Key not
    report_ingest(agent=agent_for_node(node=node), body=body)
    assert grant_id(first) in granted(node) and state(first) == S.PROVISIONING
    clock.advance(timing.provision_timeout() + timedelta(seconds=1))
    provisioning.check_provisioned(first.pk)
    assert state(first) == S.QUEUED
    removal = generation(node)
    assert set(Allocation.objects.filter(lease=first).values_list(
        "live", "released_generation")) == {(False, removal)}
    services.lease_cancel(actor=pool["alice"], lease=first)
    second = order(pool, "bob", "b")
    assert placed_and_pushed(second) == node
    assert granted(node) == {}  # not granted while the old grant may still be applied
    second.refresh_from_db()
    assert second.handover_pending
    agent_reports(node, removal)  # the node applied the removal: the event pushes b's grant
    assert granted(node) == {grant_id(second): list(range(8))}
    assert state(second) == S.PROVISIONING
    agent_reports(node, generation(node))
    assert state(second) == S.ACTIVE


def test_preemptor_waits_for_a_victim_placed_in_the_same_second(pool: dict[str, Any],
                                                                 settings: Any) -> None:
    """A victim whose slots began in the very second the preemptor starts was freed at once,
    unfenced ("it never reached the hardware"): but it was active, granted on the node, and
    the preemptor was granted the same GPUs before the victim's teardown was observed."""
    settings.GPUPOOL_PREEMPT_GRACE_S = 0
    spot, node = _active(pool)
    Lease.objects.filter(pk=spot.pk).update(priority="spot")
    _cordon_all_but(node)
    boss = order(pool, "bob", "b")  # same (frozen) second as the spot lease's start
    placing.run_schedule_pass()
    assert state(spot) == S.RELEASING and state(boss) == S.PROVISIONING
    provisioning.provision(boss.pk)
    releasing.teardown(spot.pk)
    assert grant_id(boss) not in granted(node)
    agent_reports(node, generation(node))  # the teardown is observed: boss pushed at once
    assert state(spot) == S.PREEMPTED
    assert granted(node) == {grant_id(boss): list(range(8))}
    agent_reports(node, generation(node))
    assert state(boss) == S.ACTIVE
