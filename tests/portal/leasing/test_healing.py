"""Issue 27: hardware of a running lease fails — fenced at once, replaced inside the lease
(keeping its placement promise), or degraded with the tenant's choice; never billed."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from portal.fleet.models import FabricDesiredState, NodeDesiredState, ServiceEvent
from portal.fleet.services import faults
from portal.inventory.models import Gpu, HcaPort, Node, Service
from portal.leasing import services
from portal.leasing.models import Allocation, Condition, Lease, LeaseEvent, LeaseFault, Quota
from portal.leasing.models import LeaseState as S
from portal.tenants.models import Role
from tests.portal.driving import drive
from tests.portal.factories import add_member, make_tenant


@pytest.fixture
def big_pool(db: Any, frozen_clock: Any) -> dict[str, Any]:
    """6 H100 nodes × 8, 3 per leaf; tenant a may hold 64 GPUs."""
    from portal.inventory.generator import ClusterSpec, cluster_generate

    cluster_generate(actor=None, spec=ClusterSpec(nodes=6, gpus_per_node=8, nodes_per_leaf=3,
                                                  spines=1, model="H100"))
    a = make_tenant("a")
    Quota.objects.create(tenant=a, gpu_model="H100", max_gpus=64, guaranteed_gpus=0)
    return {"a": a, "alice": add_member(a, "alice", Role.ADMIN)}


def order(pool: dict[str, Any], **kw: Any) -> Lease:
    spec = services.OrderSpec(**{"models": ["H100"], "gpu_count": 8,
                                 "duration_hours": Decimal(2), **kw})
    lease = services.order_create(actor=pool["alice"], tenant=pool["a"], spec=spec)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE
    return lease


def live_nodes(lease: Lease) -> set[str]:
    return set(Allocation.objects.filter(lease=lease, live=True)
               .values_list("node__hostname", flat=True))


def leaf_of(hostname: str) -> int | None:
    return Node.objects.get(hostname=hostname).leaf_id


def fabric_text() -> str:
    return json.dumps(FabricDesiredState.objects.get(name="default").document)


def test_dead_node_of_a_leaf_gang_is_fenced_and_replaced_on_its_leaf(
        big_pool: dict[str, Any]) -> None:
    lease = order(big_pool, nodes=2, locality="leaf", locality_required=True)
    first, second = sorted(live_nodes(lease))
    dead = Node.objects.get(hostname=first)
    other_gen = NodeDesiredState.objects.get(node__hostname=second).generation
    ports = list(HcaPort.objects.filter(node=dead).values_list("port_guid", flat=True))
    assert all(p in fabric_text() for p in ports)

    faults.node_failed(node=dead, cause="agent silent", rule="agent_silent")

    lease.refresh_from_db()
    assert lease.state == S.ACTIVE and lease.condition == Condition.HEALING
    assert first not in live_nodes(lease)
    assert not any(p in fabric_text() for p in ports)  # out of the tenant's P_Key
    assert NodeDesiredState.objects.get(node=dead).document["access_grants"] == []
    fault = LeaseFault.objects.get(lease=lease)
    assert fault.gpus == 8 and fault.node == dead

    drive()
    lease.refresh_from_db()
    now_on = live_nodes(lease)
    assert lease.state == S.ACTIVE and lease.condition == Condition.HEALTHY
    assert len(now_on) == 2 and second in now_on and first not in now_on
    replacement = (now_on - {second}).pop()
    assert leaf_of(replacement) == leaf_of(second)  # the gang's leaf promise kept
    assert NodeDesiredState.objects.get(node__hostname=second).generation == other_gen
    fault.refresh_from_db()
    assert fault.resolution == LeaseFault.Resolution.REPLACED and fault.replaced_at
    healed = LeaseEvent.objects.get(lease=lease, kind="healed")
    assert replacement in healed.reason and first in healed.reason


def test_failed_gpu_is_replaced_by_a_healthy_gpu_in_the_same_node(
        big_pool: dict[str, Any]) -> None:
    lease = order(big_pool, gpu_count=4)
    (host,) = live_nodes(lease)
    used = set(Allocation.objects.filter(lease=lease, live=True)
               .values_list("gpu__index", flat=True))
    bad = Gpu.objects.get(node__hostname=host, index=min(used))

    faults.gpu_failed(gpu=bad, cause="xid 48", rule="xid.48")
    drive()

    lease.refresh_from_db()
    now = set(Allocation.objects.filter(lease=lease, live=True)
              .values_list("node__hostname", "gpu__index"))
    assert lease.condition == Condition.HEALTHY and len(now) == 4
    assert {h for h, _ in now} == {host} and (host, bad.index) not in now
    grant = NodeDesiredState.objects.get(node__hostname=host).document["access_grants"][0]
    assert bad.index not in grant["gpu_indices"] and len(grant["gpu_indices"]) == 4


def test_no_replacement_degrades_and_the_tenant_continues_smaller(
        big_pool: dict[str, Any]) -> None:
    lease = order(big_pool, nodes=3, locality="leaf", locality_required=True)
    dead = Node.objects.get(hostname=sorted(live_nodes(lease))[0])
    faults.node_failed(node=dead, cause="ib port down", rule="ib_port_down")
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE and lease.condition == Condition.DEGRADED
    assert LeaseEvent.objects.filter(lease=lease, kind="degraded").exists()
    services.lease_degraded_choose(actor=big_pool["alice"], lease=lease, choice="continue")
    lease.refresh_from_db()
    assert lease.condition == Condition.HEALTHY
    fault = LeaseFault.objects.get(lease=lease)
    assert fault.resolution == LeaseFault.Resolution.SMALLER and fault.replaced_at is None


def test_a_waiting_degraded_lease_heals_when_capacity_frees(big_pool: dict[str, Any]) -> None:
    lease = order(big_pool, nodes=2, locality="leaf", locality_required=True)
    fillers = [order(big_pool, gpu_count=8) for _ in range(4)]  # every other node busy
    leaf = leaf_of(sorted(live_nodes(lease))[0])
    (beside,) = [f for f in fillers if leaf_of(live_nodes(f).pop()) == leaf]
    dead = Node.objects.get(hostname=sorted(live_nodes(lease))[0])
    faults.node_failed(node=dead, cause="xid 79", rule="xid.79")
    drive()
    lease.refresh_from_db()
    assert lease.condition == Condition.DEGRADED
    services.lease_degraded_choose(actor=big_pool["alice"], lease=lease, choice="wait")
    services.lease_release(actor=big_pool["alice"], lease=beside)
    drive()
    lease.refresh_from_db()
    assert lease.condition == Condition.HEALTHY and len(live_nodes(lease)) == 2
    assert {leaf_of(h) for h in live_nodes(lease)} == {leaf}


def test_failed_node_is_never_offered_before_validation(big_pool: dict[str, Any]) -> None:
    lease = order(big_pool, gpu_count=8, nodes=1)
    (host,) = live_nodes(lease)
    dead = Node.objects.get(hostname=host)
    faults.node_failed(node=dead, cause="xid 79", rule="xid.79")
    drive()
    others = [order(big_pool, gpu_count=8) for _ in range(3)]
    assert all(host not in live_nodes(o) for o in others)
    dead.refresh_from_db()
    assert dead.service == Service.OUT_OF_SERVICE
    assert ServiceEvent.objects.filter(node=dead, to_state=Service.OUT_OF_SERVICE).count() == 1


def test_released_lease_does_not_wait_for_its_dead_node(big_pool: dict[str, Any]) -> None:
    lease = order(big_pool, nodes=2, locality="leaf", locality_required=True)
    dead = Node.objects.get(hostname=sorted(live_nodes(lease))[0])
    faults.node_failed(node=dead, cause="agent silent", rule="agent_silent")
    services.lease_release(actor=big_pool["alice"], lease=lease)
    lease.refresh_from_db()
    assert lease.condition == Condition.HEALTHY
    assert LeaseFault.objects.get(lease=lease).resolution == LeaseFault.Resolution.RELEASED


def test_a_replacement_is_not_a_new_order_against_the_quota(big_pool: dict[str, Any]) -> None:
    """A tenant at its GPU quota still gets its failed node replaced."""
    Quota.objects.filter(tenant=big_pool["a"]).update(max_gpus=16)
    lease = order(big_pool, nodes=2, locality="leaf", locality_required=True)
    dead = Node.objects.get(hostname=sorted(live_nodes(lease))[0])
    faults.node_failed(node=dead, cause="agent silent", rule="agent_silent")
    drive()
    lease.refresh_from_db()
    assert lease.condition == Condition.HEALTHY and len(live_nodes(lease)) == 2


def test_spot_work_gives_way_to_a_repair(big_pool: dict[str, Any]) -> None:
    lease = order(big_pool, nodes=2, locality="leaf", locality_required=True)
    leaf = leaf_of(sorted(live_nodes(lease))[0])
    spot = [order(big_pool, gpu_count=8, priority="spot") for _ in range(4)]
    (beside,) = [s for s in spot if leaf_of(live_nodes(s).pop()) == leaf]
    dead = Node.objects.get(hostname=sorted(live_nodes(lease))[0])
    faults.node_failed(node=dead, cause="xid 79", rule="xid.79")
    drive()
    lease.refresh_from_db()
    beside.refresh_from_db()
    assert lease.condition == Condition.HEALTHY and len(live_nodes(lease)) == 2
    assert beside.state in (S.PREEMPTED, S.RELEASING)


@pytest.fixture
def one_leaf(db: Any, frozen_clock: Any) -> dict[str, Any]:
    """6 H100 nodes × 8 on one leaf: room for several replacements of a 2-node gang."""
    from portal.inventory.generator import ClusterSpec, cluster_generate

    cluster_generate(actor=None, spec=ClusterSpec(nodes=6, gpus_per_node=8, nodes_per_leaf=6,
                                                  spines=1, model="H100"))
    a = make_tenant("a")
    Quota.objects.create(tenant=a, gpu_model="H100", max_gpus=64, guaranteed_gpus=0)
    return {"a": a, "alice": add_member(a, "alice", Role.ADMIN)}


def test_a_stuck_repair_is_retried_a_capped_number_of_times_then_escalated(
        one_leaf: dict[str, Any]) -> None:
    """NVSentinel's stuck remediation: a replacement that never converges is tried
    MAX_REPAIR_TRIES times, then the lease is degraded and a person is told (audit)."""
    from datetime import timedelta

    from portal.core import clock
    from portal.core.models import AuditLog
    from portal.leasing.lifecycle import healing

    lease = order(one_leaf, nodes=2, locality="leaf", locality_required=True)
    faults.node_failed(node=Node.objects.get(hostname=sorted(live_nodes(lease))[0]),
                       cause="agent silent", rule="agent_silent")
    for _ in range(healing.MAX_REPAIR_TRIES):  # each try on another node of the leaf
        healing.heal(lease.pk)
        lease.refresh_from_db()
        assert lease.heal_targets  # a replacement written, waiting for its node
        clock.advance(timedelta(minutes=10))  # ... which never converges
        healing.check_healed(lease.pk)
    lease.refresh_from_db()
    assert lease.condition == Condition.DEGRADED and not lease.heal_targets
    assert AuditLog.objects.filter(action="lease.repair_escalated").count() == 1
    healing.heal(lease.pk)  # no further automatic try
    lease.refresh_from_db()
    assert not lease.heal_targets


def test_a_stale_xid_replayed_after_a_return_is_ignored(big_pool: dict[str, Any]) -> None:
    from datetime import timedelta

    from portal.core import clock
    from portal.core.models import AuditLog

    gpu = Gpu.objects.order_by("pk").first()
    Gpu.objects.filter(pk=gpu.pk).update(service_since=clock.now())
    gpu.refresh_from_db()
    before = clock.now() - timedelta(minutes=5)  # the event predates the return
    assert not faults.gpu_failed(gpu=gpu, cause="xid 48", rule="xid.48", at=before)
    gpu.refresh_from_db()
    assert gpu.service == Service.IN_SERVICE
    assert AuditLog.objects.filter(action="fleet.stale_event_ignored").exists()
    assert faults.gpu_failed(gpu=gpu, cause="xid 48", rule="xid.48", at=clock.now())
