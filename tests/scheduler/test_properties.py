"""Stateful property tests: place, release, advance time, node failure, preemption."""

from dataclasses import replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from scheduler import (
    Lease,
    NodeState,
    Placement,
    PriorityClass,
    Request,
    Snapshot,
    TenantQuota,
    Topology,
    schedule_pass,
)

from .builders import node

TOPO = Topology({"a": "leaf1", "b": "leaf1", "c": "leaf2", "leaf1": "spine", "leaf2": "spine"})
QUOTAS = {"g": TenantQuota("g", guaranteed={"H100": 4})}


class Scheduling(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.nodes = [node("a", "H100", 4, 2, cpu=32_000, mem=100_000),
                      node("b", "A100", 4, 1, cpu=32_000, mem=100_000,
                           shared_tenancy=True),
                      node("c", "H100", 2, 1, cpu=16_000, mem=50_000)]
        self.leases: list[Lease] = []
        self.requests: dict[str, Request] = {}
        self.now = 0
        self.seq = 0

    def snapshot(self):
        return Snapshot(tuple(self.nodes), TOPO, tuple(self.leases), QUOTAS)

    def _submit(self, r):
        snap = self.snapshot()
        res = schedule_pass(snap, [r], self.now)
        assert res == schedule_pass(snap, [r], self.now)  # determinism
        d = res.decisions[0]
        if isinstance(d, Placement):
            self.requests[r.id] = r
            gone = set(d.victims)
            assert all(v.preemptible for v in self.leases if v.id in gone)
            self.leases = [le for le in self.leases if le.id not in gone]
            self.leases.append(Lease(r.id, r.tenant, r.priority, d.parts, d.start, d.end,
                                     d.borrowed, d.model))
        return d

    @rule(gpus=st.sampled_from([1, 2, 4]), milli=st.sampled_from([1000, 1000, 300, 500]),
          nodes=st.sampled_from([1, 1, 2]), prio=st.sampled_from(list(PriorityClass)),
          delay=st.sampled_from([0, 0, 50]), duration=st.integers(10, 200),
          models=st.sampled_from([frozenset(), frozenset({"A100"}), frozenset({"H100"})]),
          cpu=st.sampled_from([0, 4000]), tenant=st.sampled_from(["g", "s", "x"]))
    def place(self, gpus, milli, nodes, prio, delay, duration, models, cpu, tenant):
        if milli < 1000:
            gpus, nodes = 1, 1
        self.seq += 1
        start = self.now + delay
        r = Request(f"r{self.seq}", tenant, prio, gpus, milli, models, cpu, 1000, nodes,
                    None, start, start + duration, self.now)
        d = self._submit(r)
        if isinstance(d, Placement):
            assert len(d.parts) == nodes  # gangs: all or nothing
            assert all(len(p.gpus) == gpus for p in d.parts)
            by_name = {n.name: n for n in self.nodes}
            for p in d.parts:
                n = by_name[p.node]
                assert n.state == NodeState.READY
                assert not models or n.model in models
                assert all(n.gpus[g].healthy for g, _ in p.gpus)

    @rule(data=st.data())
    def release(self, data):
        if self.leases:
            victim = data.draw(st.sampled_from(self.leases))
            self.leases.remove(victim)

    @rule(dt=st.integers(1, 120))
    def advance(self, dt):
        self.now += dt
        self.leases = [le for le in self.leases if le.end is None or le.end > self.now]

    @rule(idx=st.integers(0, 2), down=st.booleans())
    def node_state(self, idx, down):
        state = NodeState.DOWN if down else NodeState.READY
        self.nodes[idx] = replace(self.nodes[idx], state=state)

    @rule(gpus=st.sampled_from([2, 4]))
    def spot_fill(self, gpus):
        """Spot work that fills H100 GPUs, so that guarantees need preemption."""
        self.seq += 1
        self._submit(Request(f"s{self.seq}", "s", PriorityClass.SPOT, gpus, 1000,
                             frozenset({"H100"}), 0, 0, 1, None, self.now, self.now + 100,
                             self.now))

    @rule()
    def guarantee_over_spot(self):
        """Spot work takes every free H100 GPU; a guaranteed request must still get one."""
        for _ in range(6):
            self.seq += 1
            d = self._submit(Request(f"s{self.seq}", "s", PriorityClass.SPOT, 1, 1000,
                                     frozenset({"H100"}), 0, 0, 1, None, self.now,
                                     self.now + 100, self.now))
            if not isinstance(d, Placement):
                break
        self.claim_guarantee()

    @rule()
    def claim_guarantee(self):
        """A request within the guarantee is placed when preempting spot frees room."""
        held = sum(le.milli for le in self.leases if le.tenant == "g" and
                   le.overlaps(self.now, self.now + 1))
        if held + 1000 > 4000 or any(le.start > self.now for le in self.leases):
            return
        end = self.now + 10
        room = False
        for n in self.nodes:
            if n.state != NodeState.READY or n.model != "H100":
                continue
            used = {g for le in self.leases if not le.preemptible and le.overlaps(self.now, end)
                    for p in le.parts if p.node == n.name for g, _ in p.gpus}
            cpu = sum(p.cpu_milli for le in self.leases if not le.preemptible
                      and le.overlaps(self.now, end) for p in le.parts if p.node == n.name)
            room |= len(used) < len(n.gpus) and cpu + 4000 <= n.cpu_milli
        self.seq += 1
        r = Request(f"g{self.seq}", "g", PriorityClass.ON_DEMAND, 1, 1000,
                    frozenset({"H100"}), 4000, 1000, 1, None, self.now, end, self.now)
        d = self._submit(r)
        if room:
            assert isinstance(d, Placement), d
            assert d.model == "H100" and not d.borrowed, d

    @invariant()
    def fractions_shared_within_one_tenant(self):
        """Leases overlapping in time hold fractions of one GPU only if they belong to
        one tenant, unless the node is shared tenancy."""
        shared = {n.name for n in self.nodes if n.shared_tenancy}
        fractions = [(p.node, g, le) for le in self.leases for p in le.parts
                     for g, m in p.gpus if m < 1000 and p.node not in shared]
        for k, (node_a, gpu_a, a) in enumerate(fractions):
            for node_b, gpu_b, b in fractions[k + 1:]:
                if (node_a, gpu_a) == (node_b, gpu_b) and a.overlaps(b.start, b.end):
                    assert a.tenant == b.tenant, (node_a, gpu_a, a, b)

    @invariant()
    def never_overcommitted(self):
        points = {self.now} | {le.start for le in self.leases if le.start > self.now}
        caps = {n.name: n for n in self.nodes}
        for t in points:
            gpu: dict[tuple[str, int], int] = {}
            cpu: dict[str, int] = {}
            mem: dict[str, int] = {}
            for le in self.leases:
                if not le.overlaps(t, t + 1):
                    continue
                for p in le.parts:
                    for g, m in p.gpus:
                        gpu[(p.node, g)] = gpu.get((p.node, g), 0) + m
                    cpu[p.node] = cpu.get(p.node, 0) + p.cpu_milli
                    mem[p.node] = mem.get(p.node, 0) + p.memory_mib
            assert all(v <= 1000 for v in gpu.values()), gpu
            assert all(cpu[n] <= caps[n].cpu_milli for n in cpu)
            assert all(mem[n] <= caps[n].memory_mib for n in mem)


Scheduling.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestScheduling = Scheduling.TestCase
