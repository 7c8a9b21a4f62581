"""Named placement policies: lexicographic tiers of weighted score plugins.

A policy's cost for an option is a tuple, one entry per tier (each a weighted sum of
scorers, rounded so that float noise does not break ties); the lowest tuple wins and
remaining ties go to the lowest node index (node order).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.nodestate import NodeKey, Option, Shape
from scheduler.reserve import ReserveSettings
from scheduler.scores import SCORERS, ScoreContext

Tier = tuple[tuple[str, float], ...]
Cost = tuple[float, ...]


@dataclass(frozen=True)
class Policy:
    name: str
    tiers: tuple[Tier, ...]
    description: str = ""
    # EASY reservation for the head-of-line leaf-required gang (scheduler/reservation.py).
    # Off in the default: measured, it delayed the next-largest gangs more than it helped
    # the largest (docs/scheduler.md, "Reservation"); kept as a policy to compare.
    holds: bool = False
    # Gang reserve with time-bounded backfill (scheduler/reserve.py, ADR 0155): leaves
    # reserved for waiting leaf gangs and kept ahead for the largest one (None: off).
    reserve: ReserveSettings | None = None

    def __post_init__(self) -> None:
        for tier in self.tiers:
            for scorer, _ in tier:
                if scorer not in SCORERS:
                    raise ValueError(f"policy {self.name}: unknown scorer {scorer}")

    @property
    def uses_fabric(self) -> bool:
        """Whether the policy scores leaves (then the working state tracks leaf flags)."""
        return any(scorer == "fabric" for tier in self.tiers for scorer, _ in tier)

    def cost(
        self, ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey,
    ) -> Cost:
        return tuple(
            round(sum(w * SCORERS[s](ctx, key, shape, opt, new) for s, w in tier), 6)
            for tier in self.tiers
        )

    def explain(
        self, ctx: ScoreContext, key: NodeKey, shape: Shape, opt: Option, new: NodeKey,
    ) -> dict[str, float]:
        """Raw value of every scorer the policy uses (the placement's score breakdown)."""
        return {
            s: round(SCORERS[s](ctx, key, shape, opt, new), 6)
            for tier in self.tiers for s, _ in tier
        }


LOCALITY: Tier = (("locality", 1.0),)
# FGD's levels, plus 30 levels per unit of model pressure: pressed GPU models are kept
# for the orders that name them unless FGD prefers them by more (ADR 0231). The pressure
# is 0 everywhere when no order names a model, so the tier is then FGD's levels alone.
FGD_SCARCE: Tier = (("fgd_levels", 1.0), ("model_scarcity", 30.0))

POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("bestfit", (LOCALITY, (("bestfit", 1.0),)),
               "Least CPU+GPU left after placement (the paper's BestFit)."),
        Policy("packing", (LOCALITY, (("packing", 1.0),)),
               "Prefer busy nodes and GPUs; keep idle GPUs idle (GpuPacking)."),
        Policy("fgd", (LOCALITY, (("fgd_levels", 1.0),)),
               "Fragmentation gradient descent as published (ATC'23): integer levels, "
               "ties to node order."),
        Policy("fgd-exact", (LOCALITY, (("fgd", 1.0),)),
               "FGD on the exact fragmentation delta (no levels)."),
        Policy("fgd-bestfit", (LOCALITY, (("fgd_levels", 1.0),), (("bestfit", 1.0),),
                               (("gpu_left", 1.0),)),
               "FGD levels, then best fit (least CPU+GPU left) among the tied nodes, "
               "then the GPU with the least room left (the default before fgd+ became "
               "CPU-aware)."),
        Policy("fgd+", (LOCALITY, FGD_SCARCE, (("cpu_strand", 1.0),),
                        (("gpu_left", 1.0),), (("bestfit", 1.0),)),
               "FGD levels (plus the pressure on the node's model, ADR 0231); among the "
               "tied, the least growth of CPU-stranded GPU "
               "capacity; then the GPU with the least room left; then best fit."),
        Policy("fgd+fabric", (LOCALITY, (("fabric", 1.0),), FGD_SCARCE,
                              (("cpu_strand", 1.0),), (("gpu_left", 1.0),),
                              (("bestfit", 1.0),)),
               "fgd+ behind a fabric tier: partly used nodes and leaves first, whole "
               "free leaves and the last leaves able to host a typical gang last "
               "(identical to fgd+ on a cluster without topology)."),
        Policy("fgd+fabric+hold", (LOCALITY, (("fabric", 1.0),), FGD_SCARCE,
                                   (("cpu_strand", 1.0),), (("gpu_left", 1.0),),
                                   (("bestfit", 1.0),)),
               "fgd+fabric, and the head-of-line leaf-required gang that fits no leaf "
               "holds the leaf that frees soonest (EASY backfill: only work that ends "
               "before the gang's start may use it).", holds=True),
        Policy("fgd+fabric+reserve", (LOCALITY, (("fabric", 1.0),), FGD_SCARCE,
                                      (("cpu_strand", 1.0),), (("gpu_left", 1.0),),
                                      (("bestfit", 1.0),)),
               "fgd+fabric, and a gang reserve: every waiting leaf-required gang owns the "
               "leaf that frees soonest, and leaves are kept whole ahead for the largest "
               "leaf gang; only work that ends before a reservation's start may use it "
               "(scheduler/reserve.py).", reserve=ReserveSettings()),
    )
}

DEFAULT_POLICY = "fgd+fabric"


def get_policy(name: str | None = None) -> Policy:
    """Look a policy up by name (``None``: the default, the project's best)."""
    try:
        return POLICIES[name or DEFAULT_POLICY]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {sorted(POLICIES)}") from None
