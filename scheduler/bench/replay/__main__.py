"""``python -m scheduler.bench.replay snapshot|timeline|mig ...`` (see docs/scheduler.md;
``mig``: ``scheduler.bench.replay.mig``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from scheduler.bench.replay import mig
from scheduler.bench.replay.snapshot import alloc_at, run_snapshot
from scheduler.bench.replay.timeline import run_timeline
from scheduler.bench.replay.trace import (
    capacity_milli,
    constrain,
    ignore_models,
    load_nodes,
    load_pods,
    score_context,
    tune,
)
from scheduler.bench.replay.variants import NAMES, apply_variant
from scheduler.policy import DEFAULT_POLICY, POLICIES, get_policy


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench.replay")
    sub = parser.add_subparsers(dest="mode", required=True)
    for mode in ("snapshot", "timeline"):
        p = sub.add_parser(mode)
        p.add_argument("--nodes", required=True)
        p.add_argument("--pods", required=True)
        p.add_argument("--policy", default=DEFAULT_POLICY, choices=sorted(POLICIES))
        p.add_argument("--out", required=True)
    snap = sub.choices["snapshot"]
    group = snap.add_mutually_exclusive_group()
    group.add_argument("--tune", type=float, help="resample to this share of capacity")
    group.add_argument("--as-given", action="store_true", help="offer pods in file order")
    snap.add_argument("--seed", type=int, default=42)
    for p in (snap, sub.choices["timeline"]):
        p.add_argument("--models", choices=("kept", "ignored", "unplanned"),
                       default="kept",
                       help="pods' model constraints: kept (planned across models, "
                            "scarcity-aware), ignored (any model), or kept but placed "
                            "by cost alone (unplanned; snapshot only)")
        p.add_argument("--gpuspec", type=float, default=0.0, metavar="SHARE",
                       help="give this share of GPU pods a synthetic model constraint "
                            "first (seeded per pod name)")
        p.add_argument("--gpuspec-form", choices=("pair", "fgd", "observed"), default="pair",
                       help="pair: one of G2|G3, V100M16|V100M32, P100|T4; fgd: one "
                            "model (both V100 sizes), the form of FGD's gpuspec traces; "
                            "observed: the spec frequencies by pod shape counted in "
                            "FGD's gpuspec33 file (one model or several)")
        p.add_argument("--variant", choices=sorted(NAMES), default=None,
                       help="FGD's workload variants, derived from the given pods: "
                            "multigpuN / gpushareN make N %% of GPU pods multi-GPU / "
                            "fractional (ADR 0237); multigpuN-fgd appends multi-GPU "
                            "pods until they request N %% of the GPU, gpushareN-fgd "
                            "re-draws pods until fractional ones request N %% of it, "
                            "as FGD's files are built (ADR 0245)")
    tl = sub.choices["timeline"]
    tl.add_argument("--tenants", type=int, default=8)
    tl.add_argument("--retry-window", type=int, default=64)
    mig.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.mode == "mig":
        return mig.main(args)
    nodes = load_nodes(args.nodes)
    originals = load_pods(args.pods)
    if args.variant:
        originals = tuple(apply_variant(originals, args.variant))
    if args.gpuspec:
        originals = tuple(constrain(originals, nodes, args.gpuspec, args.gpuspec_form))
    if args.models == "ignored":
        originals = tuple(ignore_models(originals))
    policy = get_policy(args.policy)
    ctx = score_context(nodes, originals)
    report: dict[str, Any]
    if args.mode == "snapshot":
        pods = list(originals)
        if args.tune is not None:
            pods = tune(originals, args.tune, args.seed, capacity_milli(nodes))
        report = run_snapshot(nodes, pods, policy, ctx,
                              plan_models=args.models != "unplanned")
        report["seed"] = None if args.as_given or args.tune is None else args.seed
        report["models"], report["gpuspec"] = args.models, args.gpuspec
        report["gpuspec_form"], report["variant"] = args.gpuspec_form, args.variant
        summary = (f"policy={policy.name} pods={report['pods']} placed={report['placed']} "
                   f"alloc@100={alloc_at(report, 100)} alloc@130={alloc_at(report, 130)} "
                   f"decision_ms={report['decision_ms']}")
    else:
        report = run_timeline(nodes, originals, policy, ctx, args.tenants, args.retry_window)
        summary = (f"policy={policy.name} pods={report['pods']} placed={report['placed']} "
                   f"queue_delay_s={report['queue_delay_s']} "
                   f"fair_share_max_deviation={report['fair_share_max_deviation']}")
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
