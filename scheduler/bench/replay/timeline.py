"""Timeline replay: pods arrive at ``creation_time``, leave at ``deletion_time``, wait
in a queue when they do not fit.

Tenants are assigned by hashing the pod name (CRC-32) into ``tenants`` buckets of equal
weight. The waiting queue is ordered by the tenant's current GPU holding (fair share),
then arrival. On every departure the head of the queue (``retry_window`` pods) is
retried; an arrival is tried at once.
"""

from __future__ import annotations

import heapq
import math
import time
import zlib
from collections.abc import Sequence
from typing import Any

from scheduler.bench.replay.snapshot import percentile
from scheduler.bench.replay.trace import Pod, capacity_milli
from scheduler.cluster import ClusterState
from scheduler.model import Node, NodeAllocation
from scheduler.policy import Policy
from scheduler.scarcity import best_across_models
from scheduler.scores import ScoreContext

ARRIVE, DEPART = 1, 0  # departures first at equal times


def tenant_of(name: str, tenants: int) -> int:
    return zlib.crc32(name.encode()) % tenants


class _Replay:
    def __init__(self, nodes: Sequence[Node], policy: Policy, ctx: ScoreContext,
                 tenants: int, retry_window: int) -> None:
        self.state = ClusterState(nodes, policy, ctx)
        self.capacity = capacity_milli(nodes)
        self.tenants, self.retry_window = tenants, retry_window
        self.holding = [0] * tenants
        self.gpu_seconds = [0.0] * tenants
        self.allocated = 0
        self.waiting: list[tuple[int, int, int]] = []  # (holding-at-enqueue, arrival, idx)
        self.running: dict[int, tuple[NodeAllocation, int]] = {}
        self.delays: list[float] = []
        self.times: list[float] = []
        self.last_t = 0

    def advance(self, t: int) -> None:
        dt = t - self.last_t
        for k in range(self.tenants):
            self.gpu_seconds[k] += self.holding[k] / 1000 * dt
        self.last_t = t

    def try_place(self, idx: int, pod: Pod, t: int) -> bool:
        t0 = time.perf_counter()
        choice = best_across_models(self.state, pod.shape)
        if choice is not None:
            alloc = self.state.place(choice.node, pod.shape, choice.option)
            tenant = tenant_of(pod.name, self.tenants)
            self.running[idx] = (alloc, tenant)
            self.holding[tenant] += pod.gpu_request
            self.allocated += pod.gpu_request
            self.delays.append(float(t - pod.creation_time))
        self.times.append((time.perf_counter() - t0) * 1000)
        return choice is not None

    def depart(self, idx: int, pod: Pod) -> None:
        alloc, tenant = self.running.pop(idx)
        self.state.release(alloc)
        self.holding[tenant] -= pod.gpu_request
        self.allocated -= pod.gpu_request

    def retry(self, pods: Sequence[Pod], t: int) -> list[int]:
        """Retry the head of the queue; the indices placed."""
        keep: list[tuple[int, int, int]] = []
        placed: list[int] = []
        for _ in range(min(self.retry_window, len(self.waiting))):
            entry = heapq.heappop(self.waiting)
            if self.try_place(entry[2], pods[entry[2]], t):
                placed.append(entry[2])
            else:
                keep.append(entry)
        for entry in keep:
            heapq.heappush(self.waiting, entry)
        return placed


def run_timeline(nodes: Sequence[Node], pods: Sequence[Pod], policy: Policy,
                 ctx: ScoreContext, tenants: int = 8, retry_window: int = 64,
                 samples: int = 200) -> dict[str, Any]:
    events: list[tuple[int, int, int]] = []
    for i, p in enumerate(pods):
        events.append((p.creation_time, ARRIVE, i))
    events.sort()
    heapq.heapify(events)
    run = _Replay(nodes, policy, ctx, tenants, retry_window)
    series: list[dict[str, float]] = []
    horizon = max((p.deletion_time or p.creation_time for p in pods), default=0) or 1
    step = max(1, math.ceil(horizon / samples))
    next_sample = 0
    while events:
        t, kind, idx = heapq.heappop(events)
        run.advance(t)
        pod = pods[idx]
        if kind == DEPART:
            run.depart(idx, pod)
            for placed in run.retry(pods, t):
                _schedule_departure(events, pods[placed], placed, t)
        elif run.try_place(idx, pod, t):
            _schedule_departure(events, pod, idx, t)
        else:
            tenant = tenant_of(pod.name, tenants)
            heapq.heappush(run.waiting, (run.holding[tenant], pod.creation_time, idx))
        if t >= next_sample:
            series.append({"t": t, "alloc_pct": round(100 * run.allocated / run.capacity, 3),
                           "frag_pct": round(100 * run.state.fragmentation() / run.capacity, 3),
                           "queued": len(run.waiting)})
            next_sample = t + step
    total = sum(run.gpu_seconds) or 1.0
    shares = [g / total for g in run.gpu_seconds]
    return {
        "policy": policy.name,
        "pods": len(pods),
        "placed": len(run.delays),
        "never_placed": len(run.waiting),
        "queue_delay_s": {"p50": percentile(run.delays, 50), "p95": percentile(run.delays, 95)},
        "decision_ms": {"p50": round(percentile(run.times, 50), 4),
                        "p99": round(percentile(run.times, 99), 4)},
        "series": series,
        "tenants": tenants,
        "tenant_share": [round(s, 4) for s in shares],
        "fair_share_max_deviation": round(max(abs(s - 1 / tenants) for s in shares), 4),
    }


def _schedule_departure(events: list[tuple[int, int, int]], pod: Pod, idx: int,
                        t: int) -> None:
    """A pod runs for its original duration from the moment it is placed."""
    duration = (pod.deletion_time or pod.creation_time) - pod.creation_time
    heapq.heappush(events, (t + max(1, duration), DEPART, idx))
