"""``python -m scheduler.bench fabric``: the command line of the fabric benchmark.

One seed and load (:mod:`scheduler.bench.fabricbench`) or, with ``--seeds``/``--loads``,
the sweep over them (:mod:`scheduler.bench.fabricsweep`); both import the simulation,
neither imports this module.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from scheduler.bench.fabricbench import REFERENCES, Extras, fabrics, render, run
from scheduler.bench.fabricsteady import steady
from scheduler.bench.fabricsweep import per_seed, summary, sweep
from scheduler.policy import DEFAULT_POLICY


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench fabric")
    parser.add_argument("--policies", nargs="+",
                        default=["fgd+", DEFAULT_POLICY])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--fabrics", nargs="+", choices=sorted(fabrics()), default=None)
    parser.add_argument("--workload", help="replay this CSV instead of generating one")
    parser.add_argument("--csv", help="write the (last fabric's) generated workload here")
    parser.add_argument("--seeds", nargs="+", type=int,
                        help="sweep these seeds (and --loads) and print the summary table")
    parser.add_argument("--loads", nargs="+", type=float)
    parser.add_argument("--procs", type=int, default=1, help="sweep processes")
    parser.add_argument("--reference", nargs="+", choices=REFERENCES, default=[],
                        help="add bound rows: each policy without leaf requirements "
                             "(no-leaf), the workload on one bin of GPUs (fluid)")
    parser.add_argument("--fluid-headroom", nargs="+", type=int, default=[0],
                        metavar="GPUS", help="fluid rows where orders that are not gangs "
                        "may not take the last GPUS free GPUs (one row per value)")
    parser.add_argument("--spot", type=float, default=0.0, metavar="SHARE",
                        help="share of the fractional and single-node jobs that are spot: "
                        "any other job that does not fit may preempt them (they requeue)")
    parser.add_argument("--steady", action="store_true",
                        help="with --seeds: print the steady-state table (spread across "
                        "seeds, wait_leaf_frag_pct, other orders' wait; ADR 0235)")
    args = parser.parse_args(argv)
    extras = Extras(tuple(args.reference), tuple(args.fluid_headroom), args.spot)
    if args.seeds or args.loads:
        rows = sweep(args.policies, args.jobs, args.seeds or [args.seed],
                     args.loads or [args.load], args.fabrics or sorted(fabrics()), args.procs,
                     extras)
        table = steady(rows) if args.steady else summary(rows)
        print(per_seed(rows), table, sep="\n\n", flush=True)
        return 0
    print(render(run(args.policies, args.jobs, args.seed, args.load, args.workload,
                     args.csv, args.fabrics, extras)), flush=True)
    return 0
