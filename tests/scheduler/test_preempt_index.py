"""The indexed victim search (per-shape heaps; gangs bounded to the best
``GANG_VICTIM_NODES`` nodes) decides exactly like the full scan where the bound does
not cut (fewer candidate nodes than the bound)."""

from __future__ import annotations

import random

from scheduler import preempt, schedule_pass
from scheduler.bench import workload


def test_indexed_victim_search_matches_the_full_scan(monkeypatch):
    rng = random.Random(3)
    snap = workload.prefill(workload.cluster(96, per_leaf=16), rng, share=0.5)
    queue = workload.queue(600, rng)
    indexed = schedule_pass(snap, queue, 0, earliest_start_limit=0)
    assert any(getattr(d, "victims", ()) for d in indexed.decisions)  # it preempts
    assert len(snap.nodes) < preempt.GANG_VICTIM_NODES

    full_scan = preempt.find_with_victims

    def without_index(state, request, shape, topology, candidates, index=None):
        return full_scan(state, request, shape, topology, candidates)

    monkeypatch.setattr("scheduler.engine.find_with_victims", without_index)
    assert schedule_pass(snap, queue, 0, earliest_start_limit=0) == indexed
