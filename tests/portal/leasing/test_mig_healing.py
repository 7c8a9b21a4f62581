"""Issue 28 with issue 27's lifecycle: an XID on a MIG-mode GPU fails the instances on it —
every tenant's there, no other —; each lease holding one is fenced (billing stops for its
instance's GPU equivalents, ADR 0220) and gets a new instance beside its others where one
is free, else runs degraded."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from portal.fleet.services import faults
from portal.inventory.models import Gpu, MigMode, Node
from portal.leasing.models import Condition, Lease, LeaseFault, MigInstance
from portal.leasing.models import LeaseState as S
from portal.leasing.selectors import mig_devices
from tests.portal.driving import drive
from tests.portal.leasing import test_mig_orders as orders

mig_pool = orders.mig_pool  # the fixture: one H100 node, GPU 0 offered for MIG


def _two_tenants_on_gpu0(pool: dict[str, Any]) -> list[Any]:
    leases = [orders.order(pool, n) for n in range(2)]
    drive()
    for lease in leases:
        lease.refresh_from_db()
        assert lease.state == S.ACTIVE and mig_devices(lease)[0]["gpu_index"] == 0
    return leases


def _gpu1_taken_whole(pool: dict[str, Any], **kw: Any) -> Lease:
    """GPU 1 offered for MIG, then filled whole by tenant 3's 7g.80gb instance, active;
    ``kw`` goes to its order (the priority)."""
    Gpu.objects.filter(index=1).update(mig_mode=MigMode.DYNAMIC)
    lease = orders.order(pool, 3, profile="7g.80gb", **kw)
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE and mig_devices(lease)[0]["gpu_index"] == 1
    return lease


def _xid_on_gpu0(xid: int) -> None:
    """GPU 0 reports XID ``xid``; the lifecycle runs."""
    faults.gpu_failed(gpu=Gpu.objects.get(index=0), cause=f"xid {xid}", rule=f"xid.{xid}")
    drive()


def test_a_fault_on_a_mig_gpu_replaces_each_tenants_instance(mig_pool: dict[str, Any]) -> None:
    leases = _two_tenants_on_gpu0(mig_pool)
    Gpu.objects.filter(index=1).update(mig_mode=MigMode.DYNAMIC)  # room for replacements
    node = Node.objects.get()
    faults.gpu_failed(gpu=Gpu.objects.get(node=node, index=0), cause="xid 79", rule="xid.79")
    drive()
    for lease in leases:
        lease.refresh_from_db()
        assert lease.state == S.ACTIVE and lease.condition == Condition.HEALTHY
        (device,) = mig_devices(lease)
        assert device["gpu_index"] == 1 and device["uuid"].startswith("MIG-")
        fault = LeaseFault.objects.get(lease=lease)
        assert fault.resolution == LeaseFault.Resolution.REPLACED
        assert fault.gpus == Decimal("0.142")  # the instance's share is what stops billing
        assert fault.replacement["gpu_indexes"] == [1]
    assert not MigInstance.objects.filter(gpu__index=0, allocation__live=True).exists()


def test_no_free_instance_degrades_and_a_healthy_gpus_tenants_are_untouched(
        mig_pool: dict[str, Any]) -> None:
    leases = _two_tenants_on_gpu0(mig_pool)
    far = _gpu1_taken_whole(mig_pool)
    _xid_on_gpu0(79)
    for lease in leases:
        lease.refresh_from_db()
        assert lease.condition == Condition.DEGRADED
    far.refresh_from_db()
    assert far.condition == Condition.HEALTHY and not LeaseFault.objects.filter(lease=far)


def test_a_node_fault_moves_all_of_a_leases_instances_to_one_other_node(
        db: Any, frozen_clock: Any) -> None:
    from portal.inventory.generator import ClusterSpec, cluster_generate
    from portal.tenants.models import Role
    from tests.portal.factories import add_member, make_tenant

    cluster_generate(actor=None, spec=ClusterSpec(nodes=2, gpus_per_node=8, nodes_per_leaf=2,
                                                  spines=1, model="H100"))
    Gpu.objects.filter(index=0).update(mig_mode=MigMode.DYNAMIC)
    tenant = make_tenant("t0")
    pool = {0: add_member(tenant, "u0", Role.MEMBER), "t0": tenant}
    lease = orders.order(pool, 0, gpu_count=2)
    drive()
    lease.refresh_from_db()
    (first,) = {d["node"] for d in mig_devices(lease)}
    faults.node_failed(node=Node.objects.get(hostname=first), cause="ib port down",
                       rule="ib_port_down")
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE and lease.condition == Condition.HEALTHY
    devices = mig_devices(lease)
    assert len(devices) == 2 and {d["node"] for d in devices} == {
        Node.objects.exclude(hostname=first).get().hostname}  # one node, as ordered
    assert all(d["uuid"].startswith("MIG-") for d in devices)
    assert LeaseFault.objects.get(lease=lease).gpus == Decimal("0.284")


def test_mig_healing_preempts_spot_instances_when_no_instance_is_free(
        mig_pool: dict[str, Any]) -> None:
    """A paying lease's repair displaces spot work, as whole-GPU repairs do (ADR 0241);
    before, the lease went degraded while a spot instance held the room."""
    leases = _two_tenants_on_gpu0(mig_pool)
    spot = _gpu1_taken_whole(mig_pool, priority="spot")
    _xid_on_gpu0(48)
    spot.refresh_from_db()
    assert spot.state == S.PREEMPTED or spot.release_kind == S.PREEMPTED
    for lease in leases:
        lease.refresh_from_db()
        assert lease.state == S.ACTIVE and lease.condition == Condition.HEALTHY
        (device,) = mig_devices(lease)
        assert device["gpu_index"] == 1
        assert LeaseFault.objects.get(lease=lease).resolution == LeaseFault.Resolution.REPLACED


def test_a_spot_mig_lease_in_repair_preempts_nothing(mig_pool: dict[str, Any]) -> None:
    spot_a, spot_b = (orders.order(mig_pool, n, priority="spot") for n in range(2))
    drive()
    other = _gpu1_taken_whole(mig_pool, priority="spot")
    _xid_on_gpu0(48)
    other.refresh_from_db()
    assert other.state == S.ACTIVE and not other.release_kind
    for lease in (spot_a, spot_b):
        lease.refresh_from_db()
        assert lease.condition == Condition.DEGRADED
