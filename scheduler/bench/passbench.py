"""``python -m scheduler.bench pass``: the cost of one whole ``schedule_pass``.

The pure core only (no database): the same generated HGX clusters and queue mix as
``scheduler.bench`` (8-GPU nodes, 32 per leaf, about 40% pre-filled), one pass over the
whole queue, earliest starts for the first 32 unplaceable requests as in the portal.
Prints a table of pass wall time and process CPU time against nodes x queue length
(the best of ``--repeat`` runs; setup of the snapshot not included), and the CPU of
the same pass on a working state kept warm from an earlier pass (``scheduler.warm``,
as the portal runs it). The portal's side
(building the snapshot from PostgreSQL) is ``python -m tests.bench.pass_snapshot``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

from scheduler import engine
from scheduler.bench.workload import cluster, prefill, queue
from scheduler.decisions import Placement
from scheduler.warm import WarmBase

NODES = (1000, 5000, 10000)
QUEUES = (1, 1000, 5000)


def measure(nodes: int, length: int, repeat: int, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    snap = prefill(cluster(nodes), rng)
    reqs = queue(length, rng)
    best_wall, best_cpu, best_warm, placed = float("inf"), float("inf"), float("inf"), 0
    warm = WarmBase()
    engine.schedule_pass(snap, reqs, 0, warm=warm)  # the warm base of an earlier pass
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        result = engine.schedule_pass(snap, reqs, 0)
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        placed = sum(isinstance(d, Placement) for d in result.decisions)
        c0 = time.process_time()
        engine.schedule_pass(snap, reqs, 0, warm=warm)
        best_warm = min(best_warm, time.process_time() - c0)
    return {"nodes": nodes, "queue": length, "placed": placed,
            "wall_ms": round(best_wall * 1000, 1), "cpu_ms": round(best_cpu * 1000, 1),
            "per_req_ms": round(best_cpu * 1000 / length, 3),
            "warm_cpu_ms": round(best_warm * 1000, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench pass")
    parser.add_argument("--nodes", type=int, nargs="+", default=list(NODES))
    parser.add_argument("--queue", type=int, nargs="+", default=list(QUEUES))
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    print("schedule_pass (pure core, no database): best of", args.repeat)
    print(f"{'nodes':>6} {'queue':>6} {'placed':>6} {'wall_ms':>9} {'cpu_ms':>9} "
          f"{'cpu/req_ms':>10} {'warm_cpu_ms':>11}")
    for n in args.nodes:
        for q in args.queue:
            r = measure(n, q, args.repeat)
            print(f"{r['nodes']:>6} {r['queue']:>6} {r['placed']:>6} {r['wall_ms']:>9} "
                  f"{r['cpu_ms']:>9} {r['per_req_ms']:>10} {r['warm_cpu_ms']:>11}", flush=True)
    return 0
