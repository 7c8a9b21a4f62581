"""The FGD paper's snapshot experiment: offer pods one by one to an empty cluster.

A pod that does not fit fails and is not retried; no pod leaves. See
``docs/scheduler.md`` for the JSON report shape.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from scheduler.bench.replay.trace import Pod, capacity_milli
from scheduler.cluster import ClusterState
from scheduler.model import Node
from scheduler.policy import Policy
from scheduler.scarcity import best_across_models
from scheduler.scores import ScoreContext


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (0 for an empty list)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def run_snapshot(
    nodes: Sequence[Node], pods: Sequence[Pod], policy: Policy, ctx: ScoreContext,
    max_pct: int = 130, plan_models: bool = True,
) -> dict[str, Any]:
    """``plan_models=False``: multi-model pods take the policy's best node across their
    models with no scarcity tier (the behaviour before ``scheduler.scarcity``)."""
    state = ClusterState(nodes, policy, ctx)
    capacity = capacity_milli(nodes)
    frag = state.fragmentation()
    arrived = allocated = placed = 0
    sums: dict[int, list[float]] = {}
    times: list[float] = []
    for pod in pods:
        shape = pod.shape
        t0 = time.perf_counter()
        choice = best_across_models(state, shape) if plan_models else state.best(shape)
        if choice is not None:
            before = state.ctx.frag.frag(state.keys[choice.node])
            state.place(choice.node, shape, choice.option)
            frag += state.ctx.frag.frag(state.keys[choice.node]) - before
        times.append((time.perf_counter() - t0) * 1000)
        arrived += pod.gpu_request
        if choice is not None:
            placed += 1
            allocated += pod.gpu_request
        bucket = math.floor(100 * arrived / capacity + 0.5)
        if bucket <= max_pct:
            acc = sums.setdefault(bucket, [0.0, 0.0, 0.0])
            acc[0] += 100 * allocated / capacity
            acc[1] += 100 * frag / capacity
            acc[2] += 1
    series = [
        {"arrived_pct": b, "alloc_pct": round(a / n, 4), "frag_pct": round(f / n, 4)}
        for b, (a, f, n) in sorted(sums.items())
    ]
    return {
        "policy": policy.name,
        "series": series,
        "decision_ms": {"p50": round(percentile(times, 50), 4),
                        "p99": round(percentile(times, 99), 4)},
        "pods": len(pods),
        "placed": placed,
    }


def alloc_at(report: dict[str, Any], pct: int) -> float | None:
    for point in report["series"]:
        if point["arrived_pct"] == pct:
            return float(point["alloc_pct"])
    return None
