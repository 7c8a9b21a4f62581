"""``python -m scheduler.bench``: decision cost at 1k/5k/10k generated HGX nodes
(``python -m scheduler.bench fabric``: gang wait and leaf fragmentation per policy on
generated fabrics, see ``scheduler.fabricbench``; ``python -m scheduler.bench pass``: whole
pass time against nodes x queue length, see ``scheduler.passbench``).

Each cluster is 8-GPU HGX nodes, 32 per leaf, 16 leaves per spine, pre-filled to about
40% with on-demand and spot leases; a queue of ``--queue`` requests (fractional, 1/2/4/8
GPUs, a few 2-4 node gangs) is decided in one ``schedule_pass``. Reported per cluster:
decision time p50/p99 (ms, wall clock; and the same in process CPU time, which a
shared, loaded machine inflates less), throughput (requests/s over the whole pass, setup included)
and peak RSS.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from collections.abc import Sequence

from scheduler import engine
from scheduler.decisions import Placement
from scheduler.fairshare import decayed_usage, order_queue
from scheduler.model import (
    Gpu,
    Lease,
    Node,
    NodeAllocation,
    PriorityClass,
    Request,
    Snapshot,
    Topology,
)
from scheduler.replay.snapshot import percentile


def cluster(n: int, per_leaf: int = 32, leaves_per_spine: int = 16) -> Snapshot:
    nodes = []
    parent: dict[str, str] = {}
    for i in range(n):
        name = f"hgx-{i:05d}"
        nodes.append(Node(name, 224_000, 2_097_152,
                          tuple(Gpu(g, "H100", 81_920) for g in range(8))))
        leaf = i // per_leaf
        parent[name] = f"leaf-{leaf}"
        parent[f"leaf-{leaf}"] = f"spine-{leaf // leaves_per_spine}"
    return Snapshot(tuple(nodes), Topology(parent))


def prefill(snap: Snapshot, rng: random.Random, share: float = 0.4) -> Snapshot:
    leases = []
    for i, node in enumerate(snap.nodes):
        k = sum(1 for _ in range(8) if rng.random() < share)
        if k:
            prio = PriorityClass.SPOT if rng.random() < 0.25 else PriorityClass.ON_DEMAND
            part = NodeAllocation(node.name, tuple((g, 1000) for g in range(k)),
                                  k * 8000, k * 65_536)
            leases.append(Lease(f"pre-{i}", f"t{i % 7}", prio, (part,), 0,
                                rng.randrange(3600, 86_400), model="H100"))
    return Snapshot(snap.nodes, snap.topology, tuple(leases))


def queue(count: int, rng: random.Random) -> list[Request]:
    out = []
    for i in range(count):
        roll = rng.random()
        gpus, milli, nodes = 1, 1000, 1
        if roll < 0.35:
            milli = rng.choice((250, 300, 500, 700))
        elif roll < 0.6:
            gpus = 1
        elif roll < 0.8:
            gpus = rng.choice((2, 4))
        elif roll < 0.98:
            gpus = 8
        else:
            gpus, nodes = 8, rng.choice((2, 4))
        out.append(Request(f"r{i}", f"t{rng.randrange(7)}", PriorityClass.ON_DEMAND, gpus,
                           milli, cpu_milli=gpus * 8000, memory_mib=gpus * 65_536,
                           nodes=nodes, start=0, end=rng.randrange(600, 28_800),
                           submitted_at=i))
    return out


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


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["fabric"]:
        from scheduler import fabricbench

        return fabricbench.main(args_in[1:])
    if args_in[:1] == ["pass"]:
        from scheduler import passbench

        return passbench.main(args_in[1:])
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--queue", type=int, nargs="+", default=[5000])
    args = parser.parse_args(args_in)
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


if __name__ == "__main__":
    sys.exit(main())
