"""Score plugins. Each returns a *cost* for placing a shape on a node state: lower is better.

A scorer sees the node key before and after placement and the option (which GPUs), and
a shared read-only :class:`ScoreContext`. Scorers are pure, so results are memoised by
node state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from scheduler.fabric import FabricModel, break_cost
from scheduler.frag import FragModel, cpu_stranded
from scheduler.model import MILLI
from scheduler.nodestate import (
    NodeKey,
    Option,
    Shape,
    domains_spanned,
    idle_domains,
    idle_gpus,
    node_idle,
    total_free,
)


@dataclass(frozen=True)
class ScoreContext:
    frag: FragModel
    max_cpu: int = 1
    max_gpus: int = 1
    # Pressure on each model from the mix's model-constrained demand
    # (:func:`scheduler.frag.model_pressure`): pressed models are kept for the orders
    # that need them.
    model_pressure: Mapping[str, float] = field(default_factory=dict)
    # Leaves of the snapshot's topology (None: a flat cluster, the fabric scorer is 0).
    fabric: FabricModel | None = None


Scorer = Callable[[ScoreContext, NodeKey, Shape, Option, NodeKey], float]


def bestfit(ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey) -> float:
    """Least resources left after placement (CPU and GPU, equally weighted)."""
    cpu_left = new[3] / ctx.max_cpu
    gpu_left = total_free(new) / (ctx.max_gpus * MILLI)
    return 0.5 * cpu_left + 0.5 * gpu_left


def packing(ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey) -> float:
    """Keep idle GPUs idle: prefer nodes (and GPUs) already in use."""
    return idle_gpus(new) + total_free(new) / (ctx.max_gpus * MILLI + 1)


def fgd(ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey) -> float:
    """Growth of expected fragmentation (FGD), in GPU milli."""
    return ctx.frag.frag(new) - ctx.frag.frag(key)


def fgd_levels(
    ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey,
) -> float:
    """FGD as the paper's simulator ranks it: the fragmentation decrease (in GPUs)
    squashed by a sigmoid onto integer levels 0..100 (negated: a cost). Nearly equal
    moves tie, and the next tier (or node order) decides between them."""
    delta = (ctx.frag.frag(key) - ctx.frag.frag(new)) / MILLI
    return -float(int(100 / (1 + math.exp(-delta))))


def cpu_strand(
    ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey,
) -> float:
    """Growth (in GPUs) of the node's free GPU capacity stranded by missing CPU: the free
    milli that the free CPU cannot feed at the task mix's CPU-per-GPU ratio. Keeps CPU
    next to free GPUs (a CPU-exhausted node strands its GPUs), and sends CPU-heavy pods
    to CPU-rich nodes."""
    ratio = ctx.frag.cpu_per_milli
    before = cpu_stranded(key[3], total_free(key), ratio)
    return (cpu_stranded(new[3], total_free(new), ratio) - before) / MILLI


def locality(ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey) -> float:
    """NVLink domains spanned beyond the first (0 when the GPUs share one domain)."""
    return float(max(0, domains_spanned(opt) - 1))


def gpu_left(ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey) -> float:
    """Free milli left on the chosen GPU (fractional) — pack partly used GPUs first."""
    if not shape.fractional or not opt:
        return 0.0
    return float(opt[0][1] - shape.milli)


def fabric(ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey) -> float:
    """Keep whole leaves and whole NVLink domains for the gangs that need them.

    0 for a placement on a partly used node; breaking an idle node costs 1, more when
    its leaf is wholly free (+2), when the leaf would drop below the typical gang's size
    (+4), and when it is one of the last leaves able to host that gang (+8); each idle
    NVLink domain broken adds 0.25. Nodes outside any leaf cost 0 (flat clusters)."""
    broken = node_idle(key) and not node_idle(new)
    return break_cost(key[6], broken, idle_domains(key) - idle_domains(new))


def model_scarcity(
    ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey,
) -> float:
    """Pressure on this node's model from model-constrained demand (spend the least
    pressed model first; 0 everywhere when no order names a model). 0 for a CPU-only
    order: it spends no GPU, and sending it to the least pressed model's nodes would
    strand their GPUs for want of CPU."""
    if not shape.gpus:
        return 0.0
    return ctx.model_pressure.get(key[0], 0.0)


SCORERS: dict[str, Scorer] = {
    "bestfit": bestfit,
    "packing": packing,
    "fgd": fgd,
    "fgd_levels": fgd_levels,
    "cpu_strand": cpu_strand,
    "locality": locality,
    "gpu_left": gpu_left,
    "model_scarcity": model_scarcity,
    "fabric": fabric,
}
