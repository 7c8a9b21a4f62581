"""The working state kept warm between passes (scheduler.warm, issue 12 "a pass that
scales"): a fork of the warm base equals a fresh build, and passes decide exactly as
they do without it."""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

import pytest

from scheduler import engine
from scheduler.bench.workload import cluster
from scheduler.cluster import ClusterState
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
)
from scheduler.policy import get_policy
from scheduler.warm import WarmBase

POLICIES = [None, "fgd+", "bestfit"]


def _requests(rng: random.Random, step: int, now: int) -> list[Request]:
    """A mix of fractional, 1-8 GPU and leaf gangs of 2-4 nodes, some spot."""
    out = []
    for k in range(rng.randrange(1, 7)):
        roll = rng.random()
        gpus, milli, nodes = rng.choice((1, 2, 4, 8)), 1000, 1
        if roll < 0.3:
            gpus, milli = 1, rng.choice((250, 500, 700))
        elif roll < 0.45:
            gpus, nodes = 8, rng.choice((2, 4))
        prio = PriorityClass.SPOT if rng.random() < 0.2 else PriorityClass.ON_DEMAND
        out.append(Request(f"s{step}-{k}", f"t{rng.randrange(4)}", prio, gpus, milli,
                           cpu_milli=gpus * 8000, memory_mib=gpus * 65_536, nodes=nodes,
                           start=now, end=now + rng.randrange(60, 900),
                           submitted_at=step * 10 + k))
    return out


def _timeline(policy: str | None, warm: WarmBase | None, seed: int, steps: int = 25,
              ) -> list[tuple[Any, ...]]:
    """Passes over a churning 256-node fabric; returns every decision made."""
    rng = random.Random(seed)
    base = cluster(256, per_leaf=32, leaves_per_spine=4)
    leases: dict[str, Lease] = {}
    seen: list[tuple[Any, ...]] = []
    for step in range(steps):
        now = step * 60
        leases = {k: le for k, le in leases.items() if le.end is None or le.end > now}
        for victim in rng.sample(sorted(leases), k=min(len(leases), rng.randrange(3))):
            del leases[victim]  # released early
        snap = Snapshot(base.nodes, base.topology, tuple(leases.values()))
        result = engine.schedule_pass(snap, _requests(rng, step, now), now, policy, warm=warm)
        for d in result.decisions:
            if isinstance(d, Placement):
                for v in d.victims:
                    leases.pop(v, None)
                leases[d.request_id] = Lease(d.request_id, "t", PriorityClass.ON_DEMAND,
                                             d.parts, d.start, d.end, d.borrowed, d.model)
                seen.append((d.request_id, d.parts, d.victims, tuple(sorted(d.score.items()))))
            else:
                seen.append((d.request_id, d.reason, d.earliest_start))
    return seen


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", [1, 2])
def test_passes_with_a_warm_base_decide_exactly_as_without(policy: str | None,
                                                           seed: int) -> None:
    warm = WarmBase()
    with_warm = _timeline(policy, warm, seed)
    assert with_warm == _timeline(policy, None, seed)
    assert warm.stats.reused >= 15 and warm.stats.applied > 0  # it was really used
    if get_policy(policy).uses_fabric:  # gangs come and go: new fabric models, reused
        assert warm.stats.refabricked > 0


def _counts(state: ClusterState) -> dict[str, Any]:
    """A copy of everything a pass reads from a state at its start (the classes as
    sets: their order is never read)."""
    out: dict[str, Any] = {
        name: copy.deepcopy(getattr(state, name)) for name in (
            "gpu_free", "holders", "cpu_free", "mem_free", "ready", "model_cap",
            "model_free", "keys", "order")}
    out["classes"] = {key: set(members) for key, members in state.classes.items()}
    leaves = state.leaves
    if leaves is not None:
        out["leaves"] = {name: copy.deepcopy(getattr(leaves, name)) for name in (
            "idle", "size", "flags", "counted", "node_idle", "able_for_gang",
            "able_for_need", "marks", "target", "extra", "planned", "gang", "need")}
    return out


@pytest.mark.parametrize("policy", POLICIES)
def test_a_fork_of_the_warm_base_equals_a_fresh_build(policy: str | None) -> None:
    rng = random.Random(5)
    snap = cluster(128, per_leaf=16, leaves_per_spine=4)
    pol = get_policy(policy)
    warm = WarmBase()
    leases: dict[str, Lease] = {}
    for step in range(40):
        for k in rng.sample(sorted(leases), k=min(len(leases), rng.randrange(4))):
            del leases[k]
        for k in range(rng.randrange(5)):
            node = snap.nodes[rng.randrange(len(snap.nodes))]
            gpu, milli = rng.randrange(8), rng.choice((250, 500, 1000))
            parts = (replace(_part(node.name), gpus=((gpu, milli),)),)
            leases[f"l{step}-{k}"] = Lease(f"l{step}-{k}", f"t{rng.randrange(3)}",
                                           PriorityClass.ON_DEMAND, parts, 0, None)
        current = Snapshot(snap.nodes, snap.topology, tuple(leases.values()))
        waiting = [Request(f"g{step}", "t", PriorityClass.ON_DEMAND, 8, 1000,
                           nodes=rng.choice((2, 4, 8, 12)), start=0, end=60,
                           locality=Locality(LocalityLevel.LEAF, required=True))
                   for _ in range(rng.randrange(2))]  # the fabric model changes with them
        ctx = score_context(current, waiting)
        fresh = ClusterState(snap.nodes, pol, ctx, leases.values())
        forked = warm.state(snap.nodes, pol, ctx, leases.values())
        assert _counts(forked) == _counts(fresh), f"step {step}"
    assert warm.stats.reused > 30
    assert warm.stats.refabricked > 5 or not pol.uses_fabric


def _part(node: str) -> NodeAllocation:
    return NodeAllocation(node, ())


def test_what_a_pass_does_to_its_fork_never_reaches_the_base() -> None:
    snap = cluster(64, per_leaf=16)
    pol, warm = get_policy(None), WarmBase()
    ctx = score_context(snap, [])
    first = warm.state(snap.nodes, pol, ctx, ())
    before = _counts(first)
    req = Request("r", "t", PriorityClass.ON_DEMAND, 8, 1000, nodes=4, start=0, end=60)
    assert isinstance(engine.quote(snap, req, 0, warm=warm).placement, Placement)
    first.set_ready(3, False)
    first.consume(replace(_part(snap.nodes[0].name), gpus=((0, 1000),)))
    assert _counts(warm.state(snap.nodes, pol, ctx, ())) == before


def test_anything_else_changed_rebuilds_from_the_snapshot() -> None:
    snap = cluster(64, per_leaf=16)
    warm = WarmBase()
    ctx = score_context(snap, [])
    warm.state(snap.nodes, get_policy(None), ctx, ())
    warm.state(snap.nodes, get_policy(None), ctx, ())
    assert (warm.stats.rebuilt, warm.stats.reused) == (1, 1)
    warm.state(snap.nodes, get_policy("bestfit"), ctx, ())  # another policy
    cordoned = (replace(snap.nodes[0], state=NodeState.CORDONED),) + snap.nodes[1:]
    state = warm.state(cordoned, get_policy("bestfit"), ctx, ())  # a node changed
    assert state.ready[0] is False
    gang = Request("g", "t", PriorityClass.ON_DEMAND, 8, 1000, nodes=8, start=0, end=60,
                   locality=Locality(LocalityLevel.LEAF, required=True))
    warm.state(cordoned, get_policy("bestfit"), score_context(snap, [gang]), ())
    assert warm.stats.rebuilt == 3  # bestfit does not score leaves: the fabric is not read
    warm.state(cordoned, get_policy(None), ctx, ())
    assert warm.stats.rebuilt == 4
    gang_ctx = score_context(snap, [gang])
    state = warm.state(cordoned, get_policy(None), gang_ctx, ())  # a new fabric model
    assert (warm.stats.rebuilt, warm.stats.refabricked) == (4, 1)
    assert _counts(state) == _counts(ClusterState(cordoned, get_policy(None), gang_ctx))
    warm.forget()
    warm.state(cordoned, get_policy(None), ctx, ())
    assert warm.stats.rebuilt == 5
