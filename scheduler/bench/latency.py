"""``python -m scheduler.bench``: decision cost at 1k/5k/10k generated HGX nodes.

The cluster and queue are :mod:`scheduler.bench.workload`'s; a queue of ``--queue``
requests is decided in one pass. Reported per cluster: decision time p50/p99 (ms, wall
clock; and the same in process CPU time, which a shared, loaded machine inflates less),
throughput (requests/s over the whole pass, setup included) and peak RSS.
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from collections.abc import Sequence

from scheduler import engine
from scheduler.bench.replay.snapshot import percentile
from scheduler.bench.workload import cluster, prefill, queue
from scheduler.decisions import Placement
from scheduler.fairshare import decayed_usage, order_queue


def measure(n: int, count: int, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    snap = prefill(cluster(n), rng)
    reqs = queue(count, rng)
    t0 = time.perf_counter()
    run = engine._Pass(snap, reqs, 0, None)
    usage = decayed_usage(snap.usage, 0, snap.fair_share)
    times = []
    cpu_times = []
    placed = 0
    for r in order_queue(reqs, usage, snap.quotas):
        c1 = time.process_time()
        t1 = time.perf_counter()
        d = run.decide(r, want_earliest=False)
        times.append((time.perf_counter() - t1) * 1000)
        cpu_times.append((time.process_time() - c1) * 1000)
        placed += isinstance(d, Placement)
    total = time.perf_counter() - t0
    return {"nodes": n, "queue": count, "placed": placed,
            "p50_ms": round(percentile(times, 50), 3), "p99_ms": round(percentile(times, 99), 3),
            "cpu_p50_ms": round(percentile(cpu_times, 50), 3),
            "cpu_p99_ms": round(percentile(cpu_times, 99), 3),
            "throughput_per_s": round(count / total, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--queue", type=int, nargs="+", default=[5000])
    args = parser.parse_args(argv)
    print(f"{'nodes':>6} {'queue':>6} {'placed':>6} {'p50_ms':>8} {'p99_ms':>8} "
          f"{'cpu_p50':>8} {'cpu_p99':>8} {'req/s':>8} {'rss_MiB':>8}")
    for n in args.nodes:
        for q in args.queue:
            r = measure(n, q)
            print(f"{r['nodes']:>6} {r['queue']:>6} {r['placed']:>6} {r['p50_ms']:>8} "
                  f"{r['p99_ms']:>8} {r['cpu_p50_ms']:>8} {r['cpu_p99_ms']:>8} "
                  f"{r['throughput_per_s']:>8} {r['peak_rss_mib']:>8}",
                  flush=True)
    return 0

