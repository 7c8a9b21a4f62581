"""Issue 30, "a pass that scales with the queue" (ADR 0234): what a pass keeps warm
between passes — the working state (ADR 0175), the score context
(``scheduler.warmctx``), the quota ledger, the shapes' evaluations, heaps and score
breakdowns — never changes a decision. Hypothesis draws clusters, queues and sequences
of placements and releases between passes; every pass on the kept state must decide
exactly what a fresh pass decides, and the kept score context must equal a fresh one."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import engine
from scheduler.bench.workload import cluster
from scheduler.context import score_context
from scheduler.decisions import Placement
from scheduler.model import (
    Lease,
    Locality,
    LocalityLevel,
    NodeAllocation,
    NodeState,
    PriorityClass,
    Request,
    Snapshot,
    TenantQuota,
)
from scheduler.scores import ScoreContext
from scheduler.warm import WarmBase
from scheduler.warmctx import WarmContext

POLICIES = [None, "fgd+", "bestfit", "packing", "fgd+fabric+hold", "fgd+fabric+reserve"]


def _order(rng: random.Random, name: str, now: int) -> Request:
    roll = rng.random()
    gpus, milli, nodes, loc = rng.choice((1, 2, 4, 8)), 1000, 1, None
    if roll < 0.35:
        gpus, milli = 1, rng.choice((250, 300, 500, 700))
    elif roll < 0.5:
        gpus, nodes = 8, rng.choice((2, 3, 4))
        if rng.random() < 0.5:
            loc = Locality(LocalityLevel.LEAF, True)
    prio = rng.choice((PriorityClass.SPOT, PriorityClass.ON_DEMAND,
                       PriorityClass.ON_DEMAND))
    start = now if rng.random() < 0.85 else now + rng.randrange(60, 600)
    return Request(name, f"t{rng.randrange(4)}", prio, gpus, milli,
                   cpu_milli=gpus * 8000, memory_mib=gpus * 65_536, nodes=nodes,
                   start=start, end=start + rng.randrange(60, 1800), locality=loc,
                   submitted_at=rng.randrange(10_000))


def _lease(rng: random.Random, name: str, node: str, now: int) -> Lease:
    k = rng.randrange(1, 5)
    prio = PriorityClass.SPOT if rng.random() < 0.3 else PriorityClass.ON_DEMAND
    if rng.random() < 0.3:  # a fraction of one GPU
        part = NodeAllocation(node, ((rng.randrange(8), rng.choice((250, 500))),), 8000,
                              65_536)
    else:
        part = NodeAllocation(node, tuple((g, 1000) for g in range(k)), k * 8000,
                              k * 65_536)
    return Lease(name, f"t{rng.randrange(4)}", prio, (part,), now,
                 now + rng.randrange(120, 3600), model="H100")


def _fields(ctx: ScoreContext) -> tuple[object, ...]:
    return (ctx.frag.mix, ctx.max_cpu, ctx.max_gpus, dict(ctx.model_pressure), ctx.fabric)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), size=st.integers(4, 40),
       policy=st.sampled_from(POLICIES),
       steps=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4), st.integers(0, 3),
                                st.booleans()), min_size=1, max_size=6))
def test_a_kept_pass_decides_what_a_fresh_pass_decides(
        seed: int, size: int, policy: str | None,
        steps: list[tuple[int, int, int, bool]]) -> None:
    rng = random.Random(seed)
    base = cluster(size, per_leaf=8, leaves_per_spine=2)
    nodes = list(base.nodes)
    leases: dict[str, Lease] = {}
    for i, node in enumerate(nodes):
        if rng.random() < 0.4:
            leases[f"pre-{i}"] = _lease(rng, f"pre-{i}", node.name, 0)
    quotas = {"t1": TenantQuota("t1", {"H100": 4}, borrow_limit=8)}
    queue: list[Request] = []
    warm = WarmBase()
    made = 0
    for step, (arrivals, releases, outside, cordon) in enumerate(steps):
        now = step * 60
        leases = {k: le for k, le in leases.items() if le.end is None or le.end > now}
        for victim in rng.sample(sorted(leases), k=min(len(leases), releases)):
            del leases[victim]  # released between passes
        for _ in range(outside):  # placed behind the pass's back (another portal path)
            made += 1
            node = rng.choice(nodes).name
            leases[f"x{made}"] = _lease(rng, f"x{made}", node, now)
        if cordon and rng.random() < 0.5:  # a node changes: the kept state is rebuilt
            j = rng.randrange(len(nodes))
            state = (NodeState.CORDONED if nodes[j].state == NodeState.READY
                     else NodeState.READY)
            nodes[j] = replace(nodes[j], state=state)
        for _ in range(arrivals):
            made += 1
            queue.append(_order(rng, f"o{made}", now))
        snap = Snapshot(tuple(nodes), base.topology, tuple(leases.values()), quotas)
        fresh = engine.schedule_pass(snap, queue, now, policy)
        kept = engine.schedule_pass(snap, queue, now, policy, warm=warm)
        assert kept == fresh
        again = engine.schedule_pass(snap, queue, now, policy, warm=warm)
        assert again == fresh  # the same inputs twice: the kept heaps, reused as is
        waiting = []
        for order, d in zip(engine.queue_order(snap, queue, now), fresh.decisions,
                            strict=True):
            if isinstance(d, Placement):
                for v in d.victims:
                    leases.pop(v, None)
                leases[d.request_id] = Lease(d.request_id, order.tenant, order.priority,
                                             d.parts, d.start, d.end, d.borrowed, d.model)
            else:
                waiting.append(order)
        queue = waiting


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), size=st.integers(1, 40),
       churn=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1,
                      max_size=8))
def test_the_kept_score_context_equals_a_fresh_one(
        seed: int, size: int, churn: list[tuple[int, int]]) -> None:
    rng = random.Random(seed)
    base = cluster(size, per_leaf=8, leaves_per_spine=2)
    leases: dict[str, Lease] = {}
    kept = WarmContext()
    made = 0
    for adds, drops in churn:
        for victim in rng.sample(sorted(leases), k=min(len(leases), drops)):
            del leases[victim]
        for _ in range(adds):
            made += 1
            name = f"l{made}"
            if rng.random() < 0.3 and size > 1:  # a gang over two nodes
                a, b = rng.sample(list(base.nodes), 2)
                leases[name] = Lease(name, "t0", PriorityClass.ON_DEMAND, tuple(
                    NodeAllocation(n.name, tuple((g, 1000) for g in range(8)), 64_000,
                                   524_288) for n in (a, b)), 0,
                    rng.choice((None, rng.randrange(60, 9000))), model="H100")
            else:
                leases[name] = _lease(rng, name, rng.choice(base.nodes).name, 0)
        queue = [_order(rng, f"q{made}-{k}", 0) for k in range(rng.randrange(4))]
        snap = Snapshot(base.nodes, base.topology, tuple(leases.values()))
        assert _fields(kept.context(snap, queue)) == _fields(score_context(snap, queue))


def test_the_kept_score_context_is_the_same_object_when_nothing_changed() -> None:
    rng = random.Random(3)
    base = cluster(32, per_leaf=8, leaves_per_spine=2)
    leases = tuple(_lease(rng, f"l{i}", n.name, 0) for i, n in enumerate(base.nodes))
    snap = Snapshot(base.nodes, base.topology, leases)
    queue = [_order(rng, f"q{k}", 0) for k in range(5)]
    kept = WarmContext()
    first = kept.context(snap, queue)
    assert kept.context(snap, queue) is first
    changed = Snapshot(base.nodes, base.topology, leases[1:])
    assert _fields(kept.context(changed, queue)) == _fields(score_context(changed, queue))


def test_a_fork_shares_the_holders_of_its_base_until_it_changes_them() -> None:
    """Holders are copied on write (issue 30): fractions a fork places never reach the
    base, nor the base's later changes a live fork."""
    from scheduler.cluster import ClusterState
    from scheduler.policy import get_policy

    snap = cluster(4, per_leaf=4)
    node = snap.nodes[0].name
    held = Lease("a", "t1", PriorityClass.ON_DEMAND,
                 (NodeAllocation(node, ((0, 500),), 1000, 1024),), 0, None)
    ctx = score_context(snap, [])
    pol = get_policy(None)
    warm = WarmBase()
    fork = warm.state(snap.nodes, pol, ctx, [held])
    fork.consume(NodeAllocation(node, ((0, 250),), 1000, 1024), tenant="t2")
    fork.consume(NodeAllocation(node, ((1, 250),), 1000, 1024), tenant="t2")
    fresh = ClusterState(snap.nodes, pol, ctx, [held])
    again = warm.state(snap.nodes, pol, ctx, [held])
    assert again.holders == fresh.holders
    assert fork.holders[0] == {0: {"t1": 500, "t2": 250}, 1: {"t2": 250}}
    other = Lease("b", "t3", PriorityClass.ON_DEMAND,
                  (NodeAllocation(node, ((2, 300),), 1000, 1024),), 0, None)
    warm.state(snap.nodes, pol, ctx, [held, other])  # the base takes a new lease
    assert fork.holders[0] == {0: {"t1": 500, "t2": 250}, 1: {"t2": 250}}


def test_the_collector_is_off_during_a_pass_and_restored_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from scheduler import gcpause
    from scheduler.decisions import Decision

    seen: list[bool] = []
    decide = engine._Pass.decide

    def spy(self: engine._Pass, request: Request, want_earliest: bool) -> Decision:
        seen.append(gc.isenabled())
        return decide(self, request, want_earliest)

    monkeypatch.setattr(engine._Pass, "decide", spy)
    snap = cluster(4, per_leaf=4)
    rng = random.Random(1)
    queue = [_order(rng, f"q{k}", 0) for k in range(3)]
    assert gc.isenabled()
    engine.schedule_pass(snap, queue, 0)
    engine.quote(snap, queue[0], 0)
    assert seen and not any(seen)
    assert gc.isenabled()
    gc.disable()
    try:
        with gcpause.paused(), gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3000),
                                  st.integers(0, 30), st.integers(0, 3)), max_size=80),
       version=st.lists(st.integers(0, 3), min_size=31, max_size=31),
       limit=st.integers(1, 40))
def test_the_smallest_valid_victim_options_are_those_of_a_full_sort(
        entries: list[tuple[int, int, int, int]], version: list[int], limit: int) -> None:
    import heapq

    from scheduler.preempt import _smallest_valid

    heap: list[tuple[int, int, int, int]] = []
    pushed: set[tuple[int, int]] = set()
    for c, m, i, v in entries:
        if (i, v) not in pushed:  # one entry per node and version, as the heap has
            pushed.add((i, v))
            heapq.heappush(heap, (c, m, i, v))
    want = sorted({(c, m, i) for c, m, i, v in heap if v == version[i]})[:limit]
    assert _smallest_valid(heap, version, limit) == want
