"""Issue 12 "a pass that scales": a pass's setup was O(leases x leaves).

``_Pass`` built its ``ClusterState`` by consuming every running lease, and each consume
that changed a node's idle state recomputed every leaf's fabric flags and re-keyed the
nodes of every leaf whose flags changed. The state is now built from the leases in one go
(each node keyed once, the flags computed once) and a node's change re-derives only the
leaves it affects. These tests check that the state is the same as before (one lease at a
time, flags recomputed in full) and that the work is O(leases + leaves).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler import engine
from scheduler.bench.workload import cluster, prefill
from scheduler.cluster import ClusterState
from scheduler.context import score_context
from scheduler.fabric import LeafTracker
from scheduler.fabrics import fat_tree_2tier, fat_tree_3tier, superpod
from scheduler.model import (
    Lease,
    Locality,
    LocalityLevel,
    Node,
    NodeAllocation,
    NodeState,
    PriorityClass,
    Request,
    Snapshot,
    Topology,
)
from scheduler.policy import get_policy
from scheduler.scores import ScoreContext
from tests.scheduler.builders import busy_leaves, hgx_cluster, req

LEAF = Locality(LocalityLevel.LEAF, required=True)


def _filled(nodes: Sequence[Node], topology: Topology, seed: int = 7) -> Snapshot:
    """About 40% of the GPUs held (whole and fractional, several tenants), some nodes
    wholly free, some wholly busy, one node down."""
    rng = random.Random(seed)
    leases: list[Lease] = []
    for i, n in enumerate(nodes):
        k = rng.choice((0, 0, 1, 3, 8))
        if not k:
            continue
        milli = rng.choice((1000, 1000, 500, 250))
        part = NodeAllocation(n.name, tuple((g, milli) for g in range(k)), k * 1000, k * 1024)
        leases.append(Lease(f"l{i}", f"t{i % 3}", PriorityClass.ON_DEMAND, (part,), 0,
                            rng.randrange(100, 10_000), model=n.model))
    down = replace(nodes[len(nodes) // 2], state=NodeState.DOWN)
    nodes = (*nodes[:len(nodes) // 2], down, *nodes[len(nodes) // 2 + 1:])
    return Snapshot(tuple(nodes), topology, tuple(leases))


def _topologies() -> Iterator[tuple[str, Snapshot]]:
    yield "hgx 2x4", _filled(*hgx_cluster(leaves=2, per_leaf=4))
    yield "busy leaves", busy_leaves()[0]
    yield "fat tree 2 tier", _filled(*fat_tree_2tier(6, 8))
    yield "fat tree 3 tier", _filled(*fat_tree_3tier(2, 3, 4))
    yield "superpod", _filled(*superpod(2, 8))
    yield "bench 256", prefill(cluster(256), random.Random(3))


TOPOLOGIES = dict(_topologies())
QUEUES: dict[str, list[Request]] = {
    "no gang": [req("one", gpus=1)],
    "leaf gangs": [req("g4", gpus=8, nodes=4, locality=LEAF),
                   req("g2", gpus=8, nodes=2, locality=LEAF, submitted_at=1)],
}


def _automatic_drain(ctx: ScoreContext) -> ScoreContext:
    """The fabric context without named drained leaves: the tracker picks one itself,
    and which one depends on the order the leases were taken in."""
    assert ctx.fabric is not None
    return replace(ctx, fabric=replace(ctx.fabric, drains=None, drain_leaf=None))


def _one_by_one(snapshot: Snapshot, policy: str, ctx: ScoreContext,
                check_full: bool = False) -> ClusterState:
    """The state as built before: an empty state, then one consume per allocation; with
    ``check_full``, each step's flags are checked against a full recompute."""
    state = ClusterState(snapshot.nodes, get_policy(policy), ctx)
    for lease in snapshot.leases:
        for part in lease.parts:
            state.consume(part, tenant=lease.tenant)
            if check_full and state.leaves is not None:
                assert state.leaves.recompute() == [], "incremental flags went stale"
    return state


def _summary(state: ClusterState) -> dict[str, Any]:
    """Everything a decision can read from a state (versions and the change log aside)."""
    out: dict[str, Any] = {
        "keys": state.keys, "order": state.order, "ready": state.ready,
        "gpu_free": state.gpu_free, "cpu_free": state.cpu_free,
        "mem_free": state.mem_free, "holders": state.holders, "mixed": state.mixed,
        "model_cap": state.model_cap, "model_free": state.model_free,
        "classes": {key: set(members) for key, members in state.classes.items()},
    }
    leaves = state.leaves
    if leaves is not None:
        out.update(flags=leaves.flags, idle=leaves.idle, size=leaves.size,
                   target=leaves.target, able_gang=leaves.able_for_gang,
                   able_need=leaves.able_for_need)
    return out


@pytest.mark.parametrize("queue_name", sorted(QUEUES))
@pytest.mark.parametrize("policy", ["fgd+fabric", "fgd+fabric+hold", "fgd+"])
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_batch_built_state_equals_one_lease_at_a_time(topology: str, policy: str,
                                                      queue_name: str) -> None:
    snapshot = TOPOLOGIES[topology]
    ctx = score_context(snapshot, QUEUES[queue_name])
    contexts = [ctx] if ctx.fabric is None else [ctx, _automatic_drain(ctx)]
    for c in contexts:
        built = ClusterState(snapshot.nodes, get_policy(policy), c, snapshot.leases)
        batched = ClusterState(snapshot.nodes, get_policy(policy), c)
        batched.consume_all(snapshot.leases)
        reference = _one_by_one(snapshot, policy, c, check_full=True)
        assert _summary(built) == _summary(reference)
        assert _summary(batched) == _summary(reference)


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_pass_decisions_are_those_of_the_state_built_one_by_one(
        topology: str, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = TOPOLOGIES[topology]
    queue = [*QUEUES["leaf gangs"], *(req(f"r{k}", gpus=1 + k % 4, submitted_at=2 + k)
                                      for k in range(12))]
    fast = engine.schedule_pass(snapshot, queue, 0)

    def old_state(self: Any, leases: Any) -> ClusterState:
        return _one_by_one(replace(self.snapshot, leases=tuple(leases)),
                           self.policy.name, self.ctx)

    monkeypatch.setattr(engine._Pass, "_state", old_state)
    assert engine.schedule_pass(snapshot, queue, 0) == fast


# --------------------------------------------------------------- hypothesis property
@dataclass(frozen=True)
class _Take:
    node: int
    gpus: int
    milli: int
    tenant: str


_takes = st.lists(st.builds(_Take, st.integers(0, 23), st.integers(1, 8),
                            st.sampled_from([1000, 1000, 500, 250]),
                            st.sampled_from(["a", "b", ""])), max_size=40)


def _without_kept_target(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary less the automatic drained leaf's memory (``LeafTracker.target``): once
    chosen it stays chosen (``LeafTracker.history_free``), also while a leaf can hold
    the gang and no leaf is drained, so a state that went through a drain remembers it
    and a fresh one does not; every flag and key is the same."""
    return {k: v for k, v in summary.items() if k != "target"}


# Every leaf 3 of 6 nodes busy, a 4-node gang, automatic drain: leaf 0 is chosen; all
# given back, a leaf holds the gang again and nothing is drained, but leaf 0 stays the
# remembered choice (the example that failed, a ``target`` of 0 against None).
_EVERY_LEAF_HALF_BUSY = [_Take(n, 1, 1000, "a") for n in (0, 1, 2, 6, 7, 8, 12, 13, 14,
                                                        18, 19, 20)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(takes=_takes, gang=st.sampled_from([None, 2, 3, 4]), automatic=st.booleans(),
       down=st.sets(st.integers(0, 23), max_size=3))
@example(takes=_EVERY_LEAF_HALF_BUSY, gang=4, automatic=True, down=set())
def test_any_leases_build_the_same_state(takes: list[_Take], gang: int | None,
                                         automatic: bool, down: set[int]) -> None:
    nodes, topo = hgx_cluster(leaves=4, per_leaf=6)
    nodes = tuple(replace(n, state=NodeState.DOWN) if i in down else n
                  for i, n in enumerate(nodes))
    leases = tuple(
        Lease(f"l{k}", t.tenant, PriorityClass.ON_DEMAND,
              (NodeAllocation(nodes[t.node].name, tuple((g, t.milli) for g in range(t.gpus)),
                              0, 0),), 0, 100, model="H100")
        for k, t in enumerate(takes))
    snapshot = Snapshot(nodes, topo, leases)
    queue = [] if gang is None else [req("g", gpus=8, nodes=gang, locality=LEAF)]
    ctx = score_context(snapshot, queue)
    if automatic:
        ctx = _automatic_drain(ctx)
    built = ClusterState(nodes, get_policy("fgd+fabric"), ctx, leases)
    reference = _one_by_one(snapshot, "fgd+fabric", ctx, check_full=True)
    assert _summary(built) == _summary(reference)
    # Giving every lease back (one batch) is the empty state again (the automatic drain
    # target aside: the tracker keeps its choice, see ``_without_kept_target``).
    built.consume_all(leases, -1)
    empty = ClusterState(nodes, get_policy("fgd+fabric"), ctx)
    assert _without_kept_target(_summary(built)) == _without_kept_target(_summary(empty))
    if not automatic or built.leaves is None or built.leaves.history_free():
        assert _summary(built) == _summary(empty)


def test_any_leases_build_the_same_state_kept_drain_target() -> None:
    """The failing example: after the give-back the flags and keys are the empty
    state's; the automatic drain target stays the leaf chosen while it drained (by
    design, ``LeafTracker.history_free``), and it drains nothing while a leaf can hold
    the gang."""
    nodes, topo = hgx_cluster(leaves=4, per_leaf=6)
    leases = tuple(
        Lease(f"l{k}", t.tenant, PriorityClass.ON_DEMAND,
              (NodeAllocation(nodes[t.node].name, ((0, 1000),), 0, 0),), 0, 100,
              model="H100")
        for k, t in enumerate(_EVERY_LEAF_HALF_BUSY))
    snapshot = Snapshot(nodes, topo, leases)
    ctx = _automatic_drain(score_context(
        snapshot, [req("g", gpus=8, nodes=4, locality=LEAF)]))
    built = ClusterState(nodes, get_policy("fgd+fabric"), ctx, leases)
    assert built.leaves is not None and built.leaves.drained() == 0
    built.consume_all(leases, -1)
    empty = ClusterState(nodes, get_policy("fgd+fabric"), ctx)
    assert built.leaves.target == 0 and empty.leaves is not None
    assert empty.leaves.target is None
    assert built.leaves.drained() is None and empty.leaves.drained() is None
    assert _without_kept_target(_summary(built)) == _without_kept_target(_summary(empty))


# --------------------------------------------------------------- complexity guard
@dataclass
class _Work:
    """Full leaf recomputes (each visits every leaf) and node re-keys."""

    recomputes: int = 0
    keys: int = 0

    def visits(self, leaves: int) -> int:
        return self.recomputes * leaves + self.keys


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> _Work:
    counter = _Work()

    def counting(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            setattr(counter, name, getattr(counter, name) + 1)
            return method(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(LeafTracker, "recompute", counting("recomputes", LeafTracker.recompute))
    monkeypatch.setattr(ClusterState, "_make_key", counting("keys", ClusterState._make_key))
    return counter


def _bench(nodes: int) -> Snapshot:
    return prefill(cluster(nodes, per_leaf=8), random.Random(5))


@pytest.mark.parametrize("nodes", [256, 1024])
def test_quote_setup_is_linear_in_leases_plus_leaves(nodes: int, work: _Work) -> None:
    """One quote on ``nodes`` nodes (8 per leaf, ~40% of them leased): the old setup did
    about one full recompute per lease (leases x leaves leaf visits)."""
    snapshot = _bench(nodes)
    leaves, leases = nodes // 8, len(snapshot.leases)
    assert leases > nodes // 2
    result = engine.quote(snapshot, req("one", gpus=1), 0)
    assert result.placeable_now
    assert work.visits(leaves) <= 4 * (leases + nodes), work


def test_placements_re_key_only_the_affected_leaf(work: _Work) -> None:
    """A pass placing k whole-node requests (each breaks an idle node, so its leaf's
    flags change) re-keys the placed node's leaf, not every leaf's nodes."""
    nodes, per_leaf, k = 1024, 8, 40
    snapshot = _bench(nodes)
    queue = [req(f"r{j}", gpus=8, submitted_at=j) for j in range(k)]
    result = engine.schedule_pass(snapshot, queue, 0)
    assert sum(1 for d in result.decisions if d.__class__.__name__ == "Placement") == k
    builds = 1  # the pass's state (no unplaceable request: no empty or initial state)
    assert work.recomputes <= builds, work
    assert work.keys <= nodes + k * (per_leaf + 1) * 2, work
