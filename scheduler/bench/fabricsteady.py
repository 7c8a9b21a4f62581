"""The steady-state table of the fabric benchmark (issue 30, ADR 0235).

``python -m scheduler.bench fabric --steady --jobs 30000 --seeds 42 43 44 45 46 ...``
(``make bench-fabric-steady``): the sweep's rows (:mod:`scheduler.bench.fabricsweep`),
one line per (load, fabric, policy or reference) with the spread across seeds — mean and
``[min–max]`` of the per-seed gang wait p50 and p95, and the per-seed p95's standard
deviation —, ``wait_leaf_frag_pct`` (the share of gang wait-seconds during which the gang
had enough counterfactually free whole nodes in the fabric but no leaf held enough of
them: :mod:`scheduler.bench.gangwait`, ADR 0176), and the other orders' mean and p95
wait. Reference rows (``no-leaf``, ``fluid``) sit beside the policy rows; the fluid pool
has no leaves, so its leaf columns read ``-``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

Row = dict[str, Any]

STEADY_FIELDS = ("gang_p50", "gang_p95", "gang_p95_sd", "wait_leaf_frag_pct",
                 "other_wait_mean_s", "other_wait_p95_s")


def _numbers(rows: Sequence[Row], col: str) -> list[float] | None:
    values = [r[col] for r in rows]
    if any(isinstance(v, str) for v in values):
        return None
    return [float(v) for v in values]


def _spread(values: list[float] | None, digits: int = 0) -> str:
    """``mean [min–max]`` over the seeds (``-`` where the row has no such column)."""
    if not values:
        return "-"
    return (f"{statistics.fmean(values):.{digits}f} "
            f"[{min(values):.{digits}f}-{max(values):.{digits}f}]")


def steady_cells(rows: Sequence[Row]) -> list[Row]:
    """One dict per (load, fabric, policy): the table's values, as strings."""
    out: list[Row] = []
    for load, fabric in sorted({(r["load"], r["fabric"]) for r in rows}):
        cell = [r for r in rows if r["load"] == load and r["fabric"] == fabric]
        for policy in dict.fromkeys(r["policy"] for r in cell):
            mine = [r for r in cell if r["policy"] == policy]
            p95 = _numbers(mine, "gang_wait_p95_s") or []
            other_mean = _numbers(mine, "other_wait_mean_s")
            other_p95 = _numbers(mine, "other_wait_p95_s")
            out.append({
                "load": load, "fabric": fabric, "policy": policy, "seeds": len(mine),
                "gang_p50": _spread(_numbers(mine, "gang_wait_p50_s")),
                "gang_p95": _spread(p95),
                "gang_p95_sd": f"{statistics.pstdev(p95):.0f}" if p95 else "-",
                "wait_leaf_frag_pct": _spread(_numbers(mine, "wait_leaf_frag_pct"), 1),
                "other_wait_mean_s": _spread(other_mean, 1),
                "other_wait_p95_s": _spread(other_p95),
                "leaf_frag_by_nodes": _points_by_size(mine),
            })
    return out


def _points_by_size(rows: Sequence[Row]) -> str:
    """``wait_leaf_frag_pct``'s points per gang size, mean over the seeds: which gangs the
    share comes from (``nodes:points`` ascending; ``none`` when no gang waited on it, ``-``
    for a row without leaves)."""
    found = [r.get("leaf_frag_by_nodes") for r in rows]
    if not found or any(not isinstance(d, dict) for d in found):
        return "-"
    # JSON (a saved sweep) turns the sizes into strings: one int-keyed map per seed
    per_seed = [{int(k): float(v) for k, v in d.items()} for d in found if isinstance(d, dict)]
    sizes = sorted({n for d in per_seed for n in d})
    if not sizes:
        return "none"  # leaves, but no gang waited on leaf fragmentation
    return " ".join(f"{n}:{statistics.fmean(d.get(n, 0.0) for d in per_seed):.1f}"
                    for n in sizes)


def steady(rows: Sequence[Row]) -> str:
    """The steady-state table, one line per (load, fabric, policy)."""
    head = (f"{'load':>5} {'fabric':<7} {'policy':<22} {'seeds':>5} "
            f"{'gang p50 [min-max]':>20} {'gang p95 [min-max]':>22} {'p95 sd':>7} "
            f"{'wait_leaf_frag_pct':>20} {'others mean':>18} {'others p95':>16}")
    lines = [head, "-" * len(head)]
    cells = steady_cells(rows)
    for c in cells:
        lines.append(
            f"{c['load']:>5} {c['fabric']:<7} {c['policy']:<22} {c['seeds']:>5} "
            f"{c['gang_p50']:>20} {c['gang_p95']:>22} {c['gang_p95_sd']:>7} "
            f"{c['wait_leaf_frag_pct']:>20} {c['other_wait_mean_s']:>18} "
            f"{c['other_wait_p95_s']:>16}")
    lines += ["", "wait_leaf_frag_pct points by gang size (nodes:points, mean over the seeds)"]
    lines += [f"{c['load']:>5} {c['fabric']:<7} {c['policy']:<22} {c['leaf_frag_by_nodes']}"
              for c in cells if c["leaf_frag_by_nodes"] != "-"]
    return "\n".join(lines)
