"""Hypothesis over MIG and whole-GPU orders and releases on the portal (issue 28), through
the real services, scheduling pass and database: after every step no two live MIG
instances of one GPU share a memory slice, every layout is one NVIDIA allows, and no GPU
holds a MIG instance and a whole-GPU or fractional lease at once."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from portal.core.errors import ApplicationError
from portal.inventory.models import Gpu, MigMode
from portal.leasing import services
from portal.leasing.models import Allocation, Lease, MigInstance
from portal.leasing.states import RUNNING
from scheduler import mig
from tests.portal.leasing.conftest import drive

H100 = mig.CATALOGUE["H100"]
PROFILES = st.sampled_from([p.name for p in H100.profiles if not p.media])


class MigMachine(RuleBasedStateMachine):
    pool: dict[str, Any] = {}

    def __init__(self) -> None:
        super().__init__()
        MigInstance.objects.all().delete()
        Lease.objects.all().delete()

    @rule(profile=PROFILES, count=st.integers(1, 3), who=st.sampled_from(["alice", "bob"]))
    def order_mig(self, profile: str, count: int, who: str) -> None:
        self._order(who, services.OrderSpec(models=["H100"], mig_profile=profile,
                                            gpu_count=count, duration_hours=Decimal(2)))

    @rule(count=st.sampled_from([1, 2, 4, 8]), milli=st.sampled_from([1000, 1000, 500]),
          who=st.sampled_from(["alice", "bob"]))
    def order_whole(self, count: int, milli: int, who: str) -> None:
        self._order(who, services.OrderSpec(models=["H100"], gpu_count=1 if milli < 1000
                                            else count, gpu_milli=milli,
                                            duration_hours=Decimal(2)))

    def _order(self, who: str, spec: services.OrderSpec) -> None:
        tenant = self.pool["a"] if who == "alice" else self.pool["b"]
        with contextlib.suppress(ApplicationError):
            services.order_create(actor=self.pool[who], tenant=tenant, spec=spec)
        drive(2)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        running = list(Lease.objects.filter(state__in=sorted(RUNNING)).order_by("created"))
        if not running:
            return
        lease = data.draw(st.sampled_from(running))
        actor = self.pool["alice"] if lease.tenant == self.pool["a"] else self.pool["bob"]
        services.lease_release(actor=actor, lease=lease)
        drive(2)

    @invariant()
    def slices_disjoint_and_never_mixed(self) -> None:
        layouts: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for gpu_id, profile, start in MigInstance.objects.filter(
                allocation__live=True).values_list("gpu_id", "profile", "start"):
            layouts[gpu_id].append((profile, start))
        for gpu_id, layout in layouts.items():
            assert mig.layout_valid(H100, layout), layout
        plain = set(Allocation.objects.filter(live=True, lease__mig_profile="")
                    .values_list("gpu_id", flat=True))
        assert not plain & set(layouts), plain & set(layouts)
        slots = list(Allocation.objects.filter(live=True).values_list("gpu_id", "slot"))
        assert len(slots) == len(set(slots))


def test_mig_state_machine(pool: dict[str, Any]) -> None:
    Gpu.objects.filter(index__in=[0, 1, 2, 3]).update(mig_mode=MigMode.DYNAMIC)
    MigMachine.pool = pool
    machine = MigMachine.TestCase
    machine.settings = settings(max_examples=4, stateful_step_count=12, deadline=None,
                                suppress_health_check=list(HealthCheck))
    machine().runTest()
