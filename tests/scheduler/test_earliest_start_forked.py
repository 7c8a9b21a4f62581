"""``earliest_start`` from the pass's working state equals it from nothing (issue 30).

A pass asks the calendar for the earliest start of its first unplaceable orders. It used
to build a state from no lease and take every lease again, for each such order (≈ 90 ms
an order at 5,000 nodes); now it forks the pass's state and moves the window from there,
keeping the leases in the window from one candidate to the next. The answers must be the
same, for future leases, open-ended leases and leases that end inside a window too.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.attempt import find, shape_of
from scheduler.bench.workload import cluster, prefill, queue
from scheduler.cluster import ClusterState
from scheduler.context import score_context
from scheduler.model import Lease, NodeAllocation, PriorityClass
from scheduler.policy import get_policy
from scheduler.windows import MAX_CANDIDATES, earliest_start


def _future(snap_nodes: tuple, rng: random.Random, count: int) -> list[Lease]:
    out = []
    for k in range(count):
        node = rng.choice(snap_nodes)
        gpus = rng.choice((1, 4, 8))
        start = rng.randrange(1, 40_000)
        end = None if rng.random() < 0.2 else start + rng.randrange(600, 30_000)
        part = NodeAllocation(node.name, tuple((g, 1000) for g in range(8 - gpus, 8)),
                              gpus * 8000, gpus * 65_536)
        out.append(Lease(f"fut-{k}", "t9", PriorityClass.ON_DEMAND, (part,), start, end,
                         model="H100"))
    return out


def _by_definition(snap, pol, ctx, leases, req) -> int | None:  # type: ignore[no-untyped-def]
    """A fresh state of the leases overlapping each candidate window: the definition."""
    ends = sorted({le.end for le in leases if le.end is not None and le.end > 0})
    for t in [0, *ends][:MAX_CANDIDATES]:
        end = None if req.duration is None else t + req.duration
        state = ClusterState(snap.nodes, pol, ctx, [le for le in leases if le.overlaps(t, end)])
        if find(state, req, shape_of(req, None), snap.topology) is not None:
            return t
    return None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["fgd+fabric", "fgd+"]))
def test_the_forked_calendar_gives_the_same_earliest_starts(seed: int, policy: str) -> None:
    rng = random.Random(seed)
    snap = prefill(cluster(64, per_leaf=8), rng, share=0.93)
    leases = list(snap.leases) + _future(snap.nodes, rng, 30)
    reqs = queue(12, rng)
    ctx = score_context(snap, reqs)
    pol = get_policy(policy)
    active = [le for le in leases if le.overlaps(0, 1)]
    base = ClusterState(snap.nodes, pol, ctx, active)
    for req in reqs:
        shape = shape_of(req, None)
        fresh = earliest_start(snap.nodes, snap.topology, pol, ctx, leases, req, 0,
                               shape.models)
        forked = earliest_start(snap.nodes, snap.topology, pol, ctx, leases, req, 0,
                                shape.models, (base, {le.id for le in active}))
        assert forked == fresh == _by_definition(snap, pol, ctx, leases, req), req
    # the pass's state is not changed by the calendar's fork
    assert base.gpu_free == ClusterState(snap.nodes, pol, ctx, active).gpu_free
