"""``python -m scheduler.bench.replay mig``: MIG across tenants against time-sliced
fractions within one tenant, on the openb cluster (issue 28's benchmark; ADR 0236).

The workload is the openb trace's fractional pods (``num_gpu == 1``, ``0 < gpu_milli <
1000``), resampled as in the FGD paper (``trace.tune``) to 130 % of the cluster's GPU
capacity and offered one by one to the empty cluster (the snapshot experiment: a pod that
does not fit fails, none leaves). Each offered pod gets a tenant: a Zipf draw
(weight ``1 / k ** s`` for tenant ``k = 1 … N``) from ``random.Random(seed)`` after the
resampling, one draw per offered pod in order, so a seed fixes both the pods and their
tenants.

Modes (each runs the whole cluster; CPU and host memory of a node bind in all of them):

- ``timeslice`` (today): the core (``scheduler.cluster.ClusterState`` with the pod's
  tenant on its shape) places ``gpu_milli`` time-sliced fractions; a GPU is shared only
  within one tenant (``scheduler.tenancy``).
- ``mig``: GPUs of the models named MIG-capable (``--mig-models``; every one of them in
  operator mode ``dynamic``) take MIG instances of any tenant, placed by the portal's own
  placer (``scheduler.migplace.place_request``); a pod asks for the smallest orderable
  profile that covers its share in compute *and* memory (:func:`profile_for`). A pod no
  MIG GPU can take (no valid free slot, or its node's CPU/memory is spoken for) is
  offered to the core on the other GPUs, time-sliced within its tenant, as above. The
  MIG GPUs are never time-sliced in this mode (a GPU with instances is hidden from the
  core in the portal; the workload asks for MIG wherever a MIG GPU can take it).
- ``shared`` (a reference, not a product mode): time-sliced fractions of any tenants on
  one GPU, i.e. no isolation at all — what the tenancy rule costs.

The portal's MIG pass does not look at host CPU or memory (a MIG order has none); here a
node whose free CPU or memory is below the pod's is left out of the GPUs handed to the
placer, so the modes face the same host limits. The GPUs handed to it are pruned without
changing its answer (:meth:`MigPool.candidates`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.bench.replay.trace import Pod, capacity_milli, load_nodes, load_pods, tune
from scheduler.bench.replay.trace import score_context as trace_context
from scheduler.cluster import ClusterState
from scheduler.mig import can_add, model_for
from scheduler.migplace import DYNAMIC, MigGpu, MigRequest, MigWait, place_request, share_milli
from scheduler.model import MILLI, Node
from scheduler.nodestate import Shape
from scheduler.policy import DEFAULT_POLICY, Policy, get_policy

MODES = ("timeslice", "mig", "shared")
# openb's models that are MIG-capable, as the catalogue model they are taken for. None is
# known to be: T4, P100 and V100 predate MIG, the A10 has none; G2/G3 are undisclosed
# internal models. The default takes the 8-GPU G2/G3 nodes for A100 80GB boards (a
# hypothesis, nothing in the trace says so); ``--mig-models none`` runs the cluster as
# published, where ``mig`` is ``timeslice`` exactly.
DEFAULT_MIG_MODELS = {"G2": "A100", "G3": "A100"}
SEEDS = (42, 43, 44, 45, 46)


def fractional(pods: Sequence[Pod]) -> list[Pod]:
    """The pods that ask for a fraction of one GPU."""
    return [p for p in pods if p.num_gpu == 1 and 0 < p.gpu_milli < MILLI]


def profile_for(model_name: str, milli: int) -> str | None:
    """The smallest orderable profile of ``model_name`` whose compute share (of 7) and
    memory share (of 8) both reach ``milli`` / 1000 (the trace gives one share for
    both); smallest by GPU equivalents (``share_milli``), then memory slices."""
    model = model_for(model_name)
    if model is None:
        return None
    fits = [p for p in model.profiles if not p.media
            and p.compute_slices * MILLI >= milli * 7 and p.memory_slices * MILLI >= milli * 8]
    if not fits:
        return None
    return min(fits, key=lambda p: (share_milli(model_name, p.name), p.memory_slices)).name


def zipf_tenants(count: int, tenants: int, s: float, seed: int) -> list[int]:
    """``count`` tenant numbers in 0 … tenants-1, tenant k drawn with weight 1/(k+1)**s."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** s for k in range(tenants)]
    return rng.choices(range(tenants), weights, k=count)


@dataclass
class _MigNode:
    gpus: list[MigGpu]
    cpu_free: int
    mem_free: int
    used: bool = False  # some GPU carries an instance
    fits: dict[str, list[MigGpu]] = field(default_factory=dict)  # profile -> GPUs taking it


class MigPool:
    """The MIG GPUs (mode dynamic) with their layouts and their nodes' free CPU/memory."""

    def __init__(self, nodes: Sequence[Node], mig_models: Mapping[str, str]) -> None:
        self.nodes: dict[str, _MigNode] = {}
        for n in sorted(nodes, key=lambda n: n.name):
            model = mig_models.get(n.model)
            if model is None or not n.gpus:
                continue
            gpus = [MigGpu(n.name, g.index, model, DYNAMIC) for g in n.gpus if g.healthy]
            self.nodes[n.name] = _MigNode(gpus, n.cpu_milli, n.memory_mib)
        self.models = frozenset(mig_models.values())

    def candidates(self, profile: str, cpu: int, mem: int) -> list[MigGpu]:
        """The GPUs ``place_request`` would choose among, pruned so that its answer is
        the same as over all of them: nodes without the CPU/memory left out (the host
        rule above); on a node in use, only GPUs with a valid free start for ``profile``
        (an unfit GPU has instances, so it counts in no node's fresh-GPU tally and is
        never picked); of the idle nodes, the first by name per GPU count (idle nodes
        of one size tie on the placer's node key, which then takes the first name)."""
        out: list[MigGpu] = []
        idle: set[int] = set()
        for node in self.nodes.values():
            if node.cpu_free < cpu or node.mem_free < mem:
                continue
            if not node.used:
                if len(node.gpus) not in idle:
                    idle.add(len(node.gpus))
                    out.extend(node.gpus)
                continue
            fit = node.fits.get(profile)
            if fit is None:
                fit = node.fits[profile] = [g for g in node.gpus if self._takes(g, profile)]
            out.extend(fit)
        return out

    @staticmethod
    def _takes(gpu: MigGpu, profile: str) -> bool:
        """Whether ``scheduler.mig.place`` finds a start (it takes the first start
        ``can_add`` allows by score, so: whether any start is allowed)."""
        model = model_for(gpu.model)
        assert model is not None
        p = model.profile(profile)
        return any(can_add(model, p, start, gpu.layout) for start in p.starts)

    def take(self, pod: Pod, profile: str, request_id: str) -> bool:
        gpus = self.candidates(profile, pod.cpu_milli, pod.memory_mib)
        if not gpus:
            return False
        result = place_request(gpus, MigRequest(request_id, profile, 1, self.models))
        if isinstance(result, MigWait):
            return False
        (pick,) = result
        node = self.nodes[pick.node]
        pos = next(i for i, g in enumerate(node.gpus) if g.index == pick.index)
        gpu = node.gpus[pos]
        node.gpus[pos] = replace(gpu, layout=(*gpu.layout, (pick.profile, pick.start)))
        node.cpu_free -= pod.cpu_milli
        node.mem_free -= pod.memory_mib
        node.used = True
        node.fits.clear()
        return True


def run(nodes: Sequence[Node], originals: Sequence[Pod], pods: Sequence[Pod],
        tenants: Sequence[int], mode: str, policy: Policy,
        mig_models: Mapping[str, str] = DEFAULT_MIG_MODELS, max_pct: int = 130,
        ) -> dict[str, Any]:
    """Offer ``pods`` (tenant ``tenants[i]`` each) in order; the report of one mode."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")
    capacity = capacity_milli(nodes)
    models = mig_models if mode == "mig" else {}
    pool = MigPool(nodes, models)
    plain = [n for n in nodes if n.model not in models]
    state = ClusterState(plain, policy, trace_context(plain, originals))
    profile_of: dict[str, dict[int, str | None]] = {m: {} for m in pool.models}
    arrived = allocated = held = 0
    n_tenants = max(tenants, default=-1) + 1
    offered, placed, on_mig = [0] * n_tenants, [0] * n_tenants, 0
    first_fail: float | None = None
    sums: dict[int, list[float]] = {}
    for i, (pod, tenant) in enumerate(zip(pods, tenants, strict=True)):
        offered[tenant] += 1
        share = _place_mig(pool, profile_of, pod, f"p{i}")
        if share is not None:
            on_mig += 1
        else:
            shape = Shape(pod.models, 1, pod.gpu_milli, pod.cpu_milli, pod.memory_mib,
                          tenant="" if mode == "shared" else f"t{tenant}")
            choice = state.best(shape)
            if choice is not None:
                state.place(choice.node, shape, choice.option)
                share = pod.gpu_milli
        arrived += pod.gpu_request
        if share is not None:
            placed[tenant] += 1
            allocated += pod.gpu_request
            held += share
        bucket = math.floor(100 * arrived / capacity + 0.5)
        if share is None and first_fail is None:
            first_fail = round(100 * arrived / capacity, 2)
        if bucket <= max_pct:
            acc = sums.setdefault(bucket, [0.0, 0.0, 0.0])
            acc[0] += 100 * allocated / capacity
            acc[1] += 100 * held / capacity
            acc[2] += 1
    series = [{"arrived_pct": b, "alloc_pct": round(a / n, 4), "held_pct": round(h / n, 4)}
              for b, (a, h, n) in sorted(sums.items())]
    present = [k for k in range(n_tenants) if offered[k]]
    rates = [placed[k] / offered[k] for k in present]
    tail = [k for k in present if k >= n_tenants // 2]  # the Zipf tail: small tenants
    return {
        "mode": mode, "pods": len(pods), "placed": sum(placed), "on_mig": on_mig,
        "series": series,
        "alloc_pct_end": round(100 * allocated / capacity, 4),
        "held_pct_end": round(100 * held / capacity, 4),
        "tenants": len(present),
        "tenants_served": sum(1 for k in present if placed[k]),
        "first_fail_pct": first_fail,
        "tail_placed": round(sum(placed[k] for k in tail)
                             / max(1, sum(offered[k] for k in tail)), 4),
        "worst_tenant_placed": round(min(rates, default=0.0), 4),
        "tenant_placed_mean": round(sum(rates) / len(rates), 4) if rates else 0.0,
    }


def _place_mig(pool: MigPool, profile_of: dict[str, dict[int, str | None]], pod: Pod,
               request_id: str) -> int | None:
    """The pod's share in milli-GPU if it got a MIG instance, else None."""
    if pod.models and not (pod.models & set(pool.models)):
        return None
    for model, cache in profile_of.items():
        if pod.gpu_milli not in cache:
            cache[pod.gpu_milli] = profile_for(model, pod.gpu_milli)
        profile = cache[pod.gpu_milli]
        if profile is not None and pool.take(pod, profile, request_id):
            return share_milli(model, profile)
    return None


def alloc_at(report: Mapping[str, Any], pct: int, key: str = "alloc_pct") -> float | None:
    for point in report["series"]:
        if point["arrived_pct"] == pct:
            return float(point[key])
    return None


def parse_models(text: str) -> dict[str, str]:
    """``G2=A100,G3=A100`` (or ``G2,G3``: as A100); ``none``: no MIG-capable model."""
    if text.strip().lower() in ("", "none"):
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        name, _, model = item.partition("=")
        model = model.strip() or "A100"
        if model_for(model) is None:
            raise argparse.ArgumentTypeError(f"{model!r} has no MIG table")
        out[name.strip()] = model
    return out


def add_parser(sub: Any) -> None:
    p = sub.add_parser("mig", help="MIG across tenants vs time-sliced within one tenant")
    p.add_argument("--nodes", required=True)
    p.add_argument("--pods", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--tenants", type=int, default=64)
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent s")
    p.add_argument("--tune", type=float, default=1.3)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--mig-models", type=parse_models,
                   default=dict(DEFAULT_MIG_MODELS),
                   help="openb models taken as MIG-capable, NAME=CATALOGUE,... "
                        "(default G2=A100,G3=A100); 'none' for the cluster as published")
    p.add_argument("--policy", default=DEFAULT_POLICY)
    p.add_argument("--out", help="write every report as JSON here")


HEADER = (f"{'seed':>4} {'mode':>9} {'placed':>6} {'on_mig':>6} {'alloc@100':>9} "
          f"{'alloc@130':>9} {'held@130':>8} {'1st_fail':>8} {'served':>7} "
          f"{'worst':>6} {'mean':>6} {'tail':>6}")


def row(seed: int, r: Mapping[str, Any]) -> str:
    return (f"{seed:>4} {r['mode']:>9} {r['placed']:>6} {r['on_mig']:>6} "
            f"{alloc_at(r, 100)!s:>9} {alloc_at(r, 130)!s:>9} "
            f"{alloc_at(r, 130, 'held_pct')!s:>8} "
            f"{r['first_fail_pct']!s:>8} {r['tenants_served']:>3}/{r['tenants']:<3} "
            f"{r['worst_tenant_placed']:>6} {r['tenant_placed_mean']:>6} "
            f"{r['tail_placed']:>6}")


def main(args: argparse.Namespace) -> int:
    nodes = load_nodes(args.nodes)
    originals = fractional(load_pods(args.pods))
    policy = get_policy(args.policy)
    capacity = capacity_milli(nodes)
    mig_gpus = sum(len(n.gpus) for n in nodes if n.model in args.mig_models)
    print(f"openb fractional pods: {len(originals)} originals, tuned to {args.tune:.0%} of "
          f"{capacity // MILLI} GPUs; MIG GPUs: {mig_gpus} "
          f"({', '.join(f'{k} as {v}' for k, v in args.mig_models.items()) or 'none'}); "
          f"tenants: Zipf s={args.zipf} over {args.tenants}; policy {policy.name}")
    print(HEADER)
    reports: list[dict[str, Any]] = []
    for seed in args.seeds:
        pods = tune(originals, args.tune, seed, capacity)
        tenants = zipf_tenants(len(pods), args.tenants, args.zipf, seed)
        for mode in args.modes:
            r = run(nodes, originals, pods, tenants, mode, policy, args.mig_models)
            r["seed"] = seed
            reports.append(r)
            print(row(seed, r), flush=True)
    for mode in args.modes:
        rs = [r for r in reports if r["mode"] == mode]
        a100 = [alloc_at(r, 100) or 0.0 for r in rs]
        a130 = [alloc_at(r, 130) or 0.0 for r in rs]
        def mean(key: str, rs: list[dict[str, Any]] = rs) -> float:
            return sum(float(r[key] or 0.0) for r in rs) / len(rs)

        print(f"mean {mode:>9} alloc@100={sum(a100) / len(rs):.2f} "
              f"alloc@130={sum(a130) / len(rs):.2f} "
              f"held@130={mean('held_pct_end'):.2f} "
              f"first_fail={mean('first_fail_pct'):.2f} "
              f"served={mean('tenants_served'):.1f} worst={mean('worst_tenant_placed'):.4f} "
              f"mean={mean('tenant_placed_mean'):.4f} tail={mean('tail_placed'):.4f}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(reports, fh, indent=1)
    return 0
