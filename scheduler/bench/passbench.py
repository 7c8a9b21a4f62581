"""``python -m scheduler.bench pass``: the cost of one whole ``schedule_pass``.

The pure core only (no database): the same generated HGX clusters and queue mix as
``scheduler.bench`` (8-GPU nodes, 32 per leaf, about 40% pre-filled), one pass over the
whole queue, earliest starts for the first 32 unplaceable requests as in the portal.
Prints a table of pass wall time and process CPU time against nodes x queue length
(the best of ``--repeat`` runs; setup of the snapshot not included), and the CPU of
the same pass on a working state kept warm from an earlier pass (``scheduler.warm``,
as the portal runs it). ``--mig N`` adds the MIG column: after the pass, the portal's MIG
pass (``scheduler.migplace.schedule``) over every GPU in operator mode ``dynamic`` (the
GPUs the prefill or the pass holds are plain), for the queue's first ``N`` fractional
requests turned into one-instance MIG orders of the smallest profile covering their share
(``scheduler.bench.replay.mig.profile_for``); ``mig_ms/req`` is its CPU per order. The
portal's side
(building the snapshot from PostgreSQL) is ``python -m tests.bench.pass_snapshot``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

from scheduler import engine
from scheduler.bench.replay.mig import profile_for
from scheduler.bench.workload import cluster, prefill, queue
from scheduler.decisions import Placement
from scheduler.migplace import DYNAMIC, MigGpu, MigRequest, schedule
from scheduler.model import MILLI, Request, Snapshot
from scheduler.warm import WarmBase

NODES = (1000, 5000, 10000)
QUEUES = (1, 1000, 5000)


def mig_orders(reqs: Sequence[Request], count: int) -> list[MigRequest]:
    """The first ``count`` fractional requests as one-instance H100 MIG orders."""
    out: list[MigRequest] = []
    for r in reqs:
        if len(out) >= count:
            break
        profile = profile_for("H100", r.gpu_milli) if r.gpu_milli < MILLI else None
        if profile is not None:
            out.append(MigRequest(r.id, profile, 1, frozenset({"H100"})))
    return out


def mig_pass(snap: Snapshot, placements: Sequence[Placement], orders: Sequence[MigRequest],
             ) -> tuple[float, int]:
    """CPU seconds of the MIG pass over the snapshot's GPUs, and how many it placed."""
    held = {(part.node, gpu) for lease in snap.leases for part in lease.parts
            for gpu, _ in part.gpus}
    held |= {(part.node, gpu) for p in placements for part in p.parts for gpu, _ in part.gpus}
    gpus = [MigGpu(n.name, g.index, g.model, DYNAMIC, plain=(n.name, g.index) in held)
            for n in snap.nodes for g in n.gpus]
    c0 = time.process_time()
    result = schedule(gpus, orders)
    cpu = time.process_time() - c0
    return cpu, sum(1 for v in result.values() if isinstance(v, tuple))


def measure(nodes: int, length: int, repeat: int, seed: int = 7,
            mig: int = 0) -> dict[str, float]:
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
    extra: dict[str, float] = {}
    if mig:
        orders = mig_orders(reqs, mig)
        placements = [d for d in result.decisions if isinstance(d, Placement)]
        cpu, got = mig_pass(snap, placements, orders)
        extra = {"mig_orders": len(orders), "mig_placed": got,
                 "mig_ms_per_req": round(cpu * 1000 / max(1, len(orders)), 1)}
    return {**extra, "nodes": nodes, "queue": length, "placed": placed,
            "wall_ms": round(best_wall * 1000, 1), "cpu_ms": round(best_cpu * 1000, 1),
            "per_req_ms": round(best_cpu * 1000 / length, 3),
            "warm_cpu_ms": round(best_warm * 1000, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench pass")
    parser.add_argument("--nodes", type=int, nargs="+", default=list(NODES))
    parser.add_argument("--queue", type=int, nargs="+", default=list(QUEUES))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--mig", type=int, default=0, metavar="N",
                        help="add the MIG pass for the first N fractional requests")
    args = parser.parse_args(argv)
    print("schedule_pass (pure core, no database): best of", args.repeat)
    print(f"{'nodes':>6} {'queue':>6} {'placed':>6} {'wall_ms':>9} {'cpu_ms':>9} "
          f"{'cpu/req_ms':>10} {'warm_cpu_ms':>11}"
          + (f" {'mig':>4} {'mig_placed':>10} {'mig_ms/req':>10}" if args.mig else ""))
    for n in args.nodes:
        for q in args.queue:
            r = measure(n, q, args.repeat, mig=args.mig)
            mig = (f" {r['mig_orders']:>4} {r['mig_placed']:>10} {r['mig_ms_per_req']:>10}"
                   if args.mig else "")
            print(f"{r['nodes']:>6} {r['queue']:>6} {r['placed']:>6} {r['wall_ms']:>9} "
                  f"{r['cpu_ms']:>9} {r['per_req_ms']:>10} {r['warm_cpu_ms']:>11}{mig}",
                  flush=True)
    return 0
