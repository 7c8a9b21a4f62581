"""The fabric benchmark's workload on a *fluid pool*: one bin of interchangeable GPUs.

A reference for ``python -m scheduler.bench fabric --reference fluid``, not a policy: no
nodes, no NVLink domains, no leaves, so nothing a placement can fragment. A job starts as
soon as its GPU milli is free, tried in arrival order among the first ``window`` waiting
jobs on every arrival and departure — the same discipline as the benchmark's simulator.
What gangs still wait here is what no placement can remove; only *who waits* (the order
of admission) can move it. ``gang_headroom_gpus`` is that lever: orders that are not gangs
may not take the last N free GPUs (gangs go first, the other orders pay), measured in
ADR 0176.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from scheduler.bench.replay.snapshot import percentile
from scheduler.model import MILLI

WINDOW = 128  # waiting jobs tried per event, as ``fabricbench.RETRY_WINDOW``


class FluidJob(Protocol):
    @property
    def arrival(self) -> int: ...
    @property
    def duration(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def milli(self) -> int: ...


def simulate_fluid(jobs: Sequence[FluidJob], capacity_gpus: int, gang_headroom_gpus: int = 0,
                   window: int = WINDOW) -> dict[str, Any]:
    """Waits of ``jobs`` (in arrival order) on a pool of ``capacity_gpus`` GPUs."""
    capacity = capacity_gpus * MILLI
    headroom = gang_headroom_gpus * MILLI
    events: list[tuple[int, int, int]] = [(j.arrival, 1, k) for k, j in enumerate(jobs)]
    heapq.heapify(events)
    free, waiting = capacity, []  # free milli; waiting job indices in arrival order
    gang_waits: list[float] = []
    other_waits: list[float] = []
    start = jobs[len(jobs) // 5].arrival if jobs else 0  # the benchmark's warm-up
    end = jobs[-1].arrival if jobs else 0
    area, last = 0.0, 0
    while events:
        t, kind, k = heapq.heappop(events)
        lo, hi = max(last, start), min(t, end)
        if hi > lo:
            area += (capacity - free) / capacity * (hi - lo)
        last = t
        if kind == 0:
            free += jobs[k].milli
        else:
            waiting.append(k)
        kept: list[int] = []
        for pos, k2 in enumerate(waiting):
            job = jobs[k2]
            room = free if job.kind == "gang" else free - headroom
            if pos < window and job.milli <= room:
                free -= job.milli
                heapq.heappush(events, (t + job.duration, 0, k2))
                (gang_waits if job.kind == "gang" else other_waits).append(float(t - job.arrival))
            else:
                kept.append(k2)
        waiting = kept
    return {
        "alloc_pct": round(100 * area / max(end - start, 1), 2),
        "gang_wait_mean_s": _mean(gang_waits),
        "gang_wait_p50_s": percentile(gang_waits, 50),
        "gang_wait_p95_s": percentile(gang_waits, 95),
        "other_wait_mean_s": _mean(other_waits),
        "other_wait_p95_s": percentile(other_waits, 95),
        "never_placed": len(waiting),
    }


def _mean(values: Sequence[float]) -> float:
    return round(statistics.fmean(values), 1) if values else 0.0
