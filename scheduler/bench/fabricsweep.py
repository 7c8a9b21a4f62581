"""Seeds × loads × fabrics of the fabric benchmark, in parallel, and the summary table.

``python -m scheduler.bench fabric --seeds 42 43 44 --loads 0.9 0.95 --procs 4`` runs every
(seed, load, fabric) in its own process (the same seeded workload for every policy) and
prints, per load and fabric, each policy's mean over the seeds: allocation, gang wait mean,
gang wait p95 (mean and median of the per-seed p95), on how many seeds the policy's p95 is
at most half the baseline's (``fgd+``, today's policy; seeds where the baseline waits at
all), leaf fragmentation and why gangs waited (``scheduler.bench.gangwait``, share of
gang wait-seconds).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from scheduler.bench.fabricbench import NO_EXTRAS, Extras, run
from scheduler.bench.gangwait import BUCKETS

Row = dict[str, Any]
BASELINE = "fgd+"


Task = tuple[tuple[str, ...], int, int, float, str, Extras]


def _one(task: Task) -> list[Row]:
    policies, jobs, seed, load, fabric, extras = task
    rows = run(policies, jobs, seed, load, None, None, [fabric], extras)[0][1]
    return [{**r, "seed": seed, "load": load, "fabric": fabric} for r in rows]


def sweep(policies: Sequence[str], jobs: int, seeds: Sequence[int], loads: Sequence[float],
          fabrics: Sequence[str], procs: int = 1, extras: Extras = NO_EXTRAS) -> list[Row]:
    tasks: list[Task] = [(tuple(policies), jobs, s, ld, f, extras)
                         for ld in loads for f in fabrics for s in seeds]
    out: list[Row] = []
    if procs <= 1:
        for t in tasks:
            out += _progress(_one(t))
        return out
    with ProcessPoolExecutor(procs) as pool:
        for fut in as_completed([pool.submit(_one, t) for t in tasks]):
            out += _progress(fut.result())
    return out


def _progress(rows: list[Row]) -> list[Row]:
    """Each finished run on stderr (a long sweep shows what it has so far)."""
    first = rows[0]
    print(f"done load={first['load']} fabric={first['fabric']} seed={first['seed']}: "
          + ", ".join(f"{r['policy']} p95={r['gang_wait_p95_s']:.0f} "
                      f"alloc={r['alloc_pct']}" for r in rows), file=sys.stderr, flush=True)
    return rows


def _halved(rows: Sequence[Row], policy: str) -> str:
    base = {(r["seed"]): r["gang_wait_p95_s"] for r in rows if r["policy"] == BASELINE}
    mine = {(r["seed"]): r["gang_wait_p95_s"] for r in rows if r["policy"] == policy}
    waited = [s for s, v in base.items() if v > 0 and s in mine]
    return f"{sum(1 for s in waited if mine[s] <= base[s] / 2)}/{len(waited)}"


def summary(rows: Sequence[Row]) -> str:
    head = (f"{'load':>5} {'fabric':<7} {'policy':<18} {'seeds':>5} {'alloc%':>7} "
            f"{'wait mean':>9} {'p95 mean':>9} {'p95 med':>8} {'halved':>6} "
            f"{'others mean':>11} {'others p95':>10} {'leaffrag%':>9} "
            + " ".join(f"{b:>9}" for b in BUCKETS))
    lines = [head, "-" * len(head)]
    cells = sorted({(r["load"], r["fabric"]) for r in rows})
    for load, fabric in cells:
        cell = [r for r in rows if r["load"] == load and r["fabric"] == fabric]
        for policy in dict.fromkeys(r["policy"] for r in cell):
            mine = [r for r in cell if r["policy"] == policy]

            def mean(col: str, rs: Sequence[Row] = mine) -> float:
                """Mean over the seeds; NaN (printed ``nan``) for a column the row
                does not have (the fluid reference has no leaves)."""
                values = [r[col] for r in rs]
                if any(isinstance(v, str) for v in values):
                    return math.nan
                return statistics.fmean(float(v) for v in values)

            name = f"{policy} (today)" if policy == BASELINE else policy
            p95s = [float(r["gang_wait_p95_s"]) for r in mine]
            lines.append(
                f"{load:>5} {fabric:<7} {name:<18} {len(mine):>5} {mean('alloc_pct'):>7.2f} "
                f"{mean('gang_wait_mean_s'):>9.0f} {statistics.fmean(p95s):>9.0f} "
                f"{statistics.median(p95s):>8.0f} "
                f"{'-' if policy == BASELINE else _halved(cell, policy):>6} "
                f"{mean('other_wait_mean_s'):>11.0f} {mean('other_wait_p95_s'):>10.0f} "
                f"{mean('leaf_frag_pct'):>9.2f} "
                + " ".join(f"{mean(f'wait_{b}_pct'):>9.1f}" for b in BUCKETS))
    return "\n".join(lines)


def per_seed(rows: Sequence[Row]) -> str:
    """One line per run: the per-seed p95 (the summary's inputs)."""
    out = ["load fabric seed " + " ".join(dict.fromkeys(r["policy"] for r in rows))]
    keys = sorted({(r["load"], r["fabric"], r["seed"]) for r in rows})
    for key in keys:
        vals = [r for r in rows if (r["load"], r["fabric"], r["seed"]) == key]
        out.append(f"{key[0]} {key[1]} {key[2]} "
                   + " ".join(f"{r['gang_wait_p95_s']:.0f}" for r in vals))
    return "\n".join(out)
