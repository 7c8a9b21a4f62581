"""Hypothesis state machine over orders, cancels, extensions, releases, time, node failure,
and hardware faults and repairs inside running leases (issue 27).

After every step: no GPU slot held twice at any instant, no tenant above its quota, no live
allocation for a lease in a terminal state, active leases hold exactly their GPUs (fewer
while healing or degraded, never more), no running lease on hardware out of service, and
no new placement on a node that is down or a part that is not in service.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from portal.core import clock
from portal.core.errors import ApplicationError
from portal.fleet.lifecycle import KEPT_BY_LEASES
from portal.fleet.services import faults, validation
from portal.inventory.models import Gpu, Node, Service
from portal.inventory.services import node_set_state
from portal.leasing import services
from portal.leasing.models import Allocation, Condition, Lease, LeaseFault, Quota
from portal.leasing.models import LeaseState as S
from portal.leasing.states import RUNNING, TERMINAL
from tests.portal.leasing.conftest import drive

SIZES = st.sampled_from([(1, 1000), (2, 1000), (4, 1000), (8, 1000), (1, 500), (1, 250)])


class LeasingMachine(RuleBasedStateMachine):
    pool: dict[str, Any] = {}

    def __init__(self) -> None:
        super().__init__()
        LeaseFault.objects.all().delete()
        Lease.objects.all().delete()
        Node.objects.update(state=Node.State.READY, service=Service.IN_SERVICE)
        Gpu.objects.update(service=Service.IN_SERVICE, health=Gpu.Health.HEALTHY)
        self.down: set[int] = set()

    @rule(size=SIZES, who=st.sampled_from(["alice", "bob"]), hours=st.integers(1, 6),
          later=st.sampled_from([0, 0, 0, 2]))
    def place_order(self, size: tuple[int, int], who: str, hours: int, later: int) -> None:
        tenant = self.pool["a"] if who == "alice" else self.pool["b"]
        spec = services.OrderSpec(models=["H100"], gpu_count=size[0], gpu_milli=size[1],
                                  duration_hours=Decimal(hours),
                                  start_at=clock.now() + timedelta(hours=later) if later else None)
        with contextlib.suppress(ApplicationError):
            services.order_create(actor=self.pool[who], tenant=tenant, spec=spec)

    @rule(data=st.data())
    def cancel_or_release(self, data: st.DataObject) -> None:
        leases = list(Lease.objects.exclude(state__in=TERMINAL).order_by("created"))
        if not leases:
            return
        lease = data.draw(st.sampled_from(leases))
        actor = self.pool["alice"] if lease.tenant == self.pool["a"] else self.pool["bob"]
        try:
            if lease.state == S.ACTIVE:
                services.lease_release(actor=actor, lease=lease)
            else:
                services.lease_cancel(actor=actor, lease=lease)
        except ApplicationError:
            pass

    @rule(data=st.data(), hours=st.integers(1, 5))
    def extend(self, data: st.DataObject, hours: int) -> None:
        leases = list(Lease.objects.filter(state=S.ACTIVE).order_by("created"))
        if not leases:
            return
        lease = data.draw(st.sampled_from(leases))
        actor = self.pool["alice"] if lease.tenant == self.pool["a"] else self.pool["bob"]
        with contextlib.suppress(ApplicationError):
            services.lease_extend(actor=actor, lease=lease,
                                  end_at=lease.end_at + timedelta(hours=hours))

    @rule(minutes=st.sampled_from([10, 60, 180]))
    def advance_time(self, minutes: int) -> None:
        clock.advance(timedelta(minutes=minutes))

    @precondition(lambda self: len(self.down) < 2)
    @rule(index=st.integers(0, 3))
    def node_fails(self, index: int) -> None:
        node = Node.objects.order_by("hostname")[index]
        node_set_state(actor=None, node=node, state=Node.State.DOWN, reason="test")
        self.down.add(node.pk)

    @rule(index=st.integers(0, 3), gpu=st.integers(-1, 7))
    def hardware_fails(self, index: int, gpu: int) -> None:
        """A GPU (or, -1, the whole node) fails: fenced out of its leases, sent to repair."""
        node = Node.objects.order_by("hostname")[index]
        if gpu < 0:
            faults.node_failed(node=node, cause="xid 79", rule="xid.79")
        else:
            faults.gpu_failed(gpu=Gpu.objects.get(node=node, index=gpu), cause="xid 48",
                              rule="xid.48")

    @rule(data=st.data(), passed=st.booleans())
    def repaired_and_validated(self, data: st.DataObject, passed: bool) -> None:
        parts = [*Node.objects.filter(service=Service.OUT_OF_SERVICE).order_by("pk"),
                 *Gpu.objects.filter(service=Service.OUT_OF_SERVICE).order_by("pk")]
        if not parts:
            return
        part = data.draw(st.sampled_from(parts))
        run = validation.validate(part=part)
        node = part if isinstance(part, Node) else part.node
        validation.observed(node=node, result={"id": run.request_id, "passed": passed, "finished_at": 1.0,
                                               "checks": [] if passed else [
                                                   {"name": "ecc", "ok": False}]})

    @rule()
    def reconcile(self) -> None:
        before = set(Allocation.objects.filter(live=True).values_list("pk", flat=True))
        out = set(Gpu.objects.exclude(service=Service.IN_SERVICE).values_list("pk", flat=True))
        out |= set(Gpu.objects.exclude(node__service=Service.IN_SERVICE)
                   .values_list("pk", flat=True))
        drive(rounds=2)
        fresh = Allocation.objects.filter(live=True).exclude(pk__in=before)
        assert not fresh.filter(node_id__in=self.down).exists(), "placed on a down node"
        assert not fresh.filter(gpu_id__in=out).exists(), "placed on hardware in repair"

    @invariant()
    def no_slot_is_double_booked(self) -> None:
        rows = list(Allocation.objects.filter(live=True).values_list(
            "gpu_id", "slot", "start_at", "end_at"))
        by_slot: dict[tuple[int, int], list[tuple[Any, Any]]] = defaultdict(list)
        for gpu, slot, start, end in rows:
            by_slot[(gpu, slot)].append((start, end))
        for periods in by_slot.values():
            periods.sort()
            for (_, end), (start, _) in zip(periods, periods[1:], strict=False):
                assert start >= end, "overlapping allocations of one GPU slot"

    @invariant()
    def quotas_hold(self) -> None:
        now = clock.now()
        for quota in Quota.objects.select_related("tenant"):
            slots = Allocation.objects.filter(live=True, lease__tenant=quota.tenant,
                                              start_at__lte=now, end_at__gt=now).count()
            assert slots / 8 <= quota.max_gpus

    @invariant()
    def terminal_leases_hold_nothing(self) -> None:
        assert not Allocation.objects.filter(live=True, lease__state__in=TERMINAL).exists()

    @invariant()
    def active_leases_hold_their_size(self) -> None:
        for lease in Lease.objects.filter(state=S.ACTIVE):
            slots = Allocation.objects.filter(lease=lease, live=True).count()
            size = lease.gpu_count * lease.nodes * lease.gpu_milli // 125
            smaller = LeaseFault.objects.filter(
                lease=lease, resolution=LeaseFault.Resolution.SMALLER).exists()
            if lease.condition == Condition.HEALTHY and not smaller:
                assert slots == size
            assert slots <= size, "a healed lease holds more than it ordered"

    @invariant()
    def no_running_lease_on_hardware_in_repair(self) -> None:
        held = Allocation.objects.filter(live=True, lease__state__in=sorted(RUNNING))
        assert not held.exclude(gpu__service__in=sorted(KEPT_BY_LEASES)).exists()
        assert not held.exclude(node__service__in=sorted(KEPT_BY_LEASES)).exists()


@pytest.mark.slow
def test_leasing_state_machine(pool: dict[str, Any]) -> None:
    LeasingMachine.pool = pool
    Quota.objects.filter(tenant=pool["a"]).update(gpu_hour_budget=None)
    machine = LeasingMachine.TestCase
    machine.settings = settings(max_examples=8, stateful_step_count=15, deadline=None,
                                suppress_health_check=list(HealthCheck))
    machine().runTest()


def test_the_machine_can_fail(pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch all three quota layers off: the quota invariant must catch the overrun."""
    from portal.leasing import allocation
    from portal.leasing.lifecycle import placing

    monkeypatch.setattr(allocation, "_quotas", lambda: {})
    monkeypatch.setattr(placing, "_quota_allows", lambda lease, placement: True)
    monkeypatch.setattr(services, "check_limits", lambda *a, **k: None)
    LeasingMachine.pool = pool
    machine = LeasingMachine()
    for _ in range(2):  # tenant b's quota is 8 GPUs
        machine.place_order(size=(8, 1000), who="bob", hours=2, later=0)
    machine.reconcile()
    with pytest.raises(AssertionError):
        machine.quotas_hold()


def test_the_machine_catches_a_lease_left_on_hardware_in_repair(
        pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fence, a failed GPU stays in its lease: the invariant must say so."""
    from portal.leasing.lifecycle import healing

    monkeypatch.setattr(healing, "fence", lambda lease, **kw: None)
    LeasingMachine.pool = pool
    machine = LeasingMachine()
    machine.place_order(size=(8, 1000), who="alice", hours=2, later=0)
    machine.reconcile()
    node = Allocation.objects.filter(live=True).values_list("node__hostname", flat=True)[0]
    index = list(Node.objects.order_by("hostname").values_list("hostname", flat=True)).index(node)
    machine.hardware_fails(index=index, gpu=-1)
    with pytest.raises(AssertionError):
        machine.no_running_lease_on_hardware_in_repair()
