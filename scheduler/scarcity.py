"""Orders that name several GPU models: plan across models, spend the least scarce one.

An order that accepts, say, ``H100|A100`` used to take whichever node the policy's cost
ranked first across both models — on equal costs, node order — so it could use up the
scarce model that the next single-model order needed. Now each allowed model's best node
is looked up (one heap per single-model shape, as for any order) and the choice is
lexicographic: the policy's *lead* tiers (locality, fabric and the first placement tier:
FGD's levels in the default policy, so allocation quality comes first), then the model
with the largest **free share** (free GPU milli of ready nodes ÷ that model's capacity),
then the remaining tiers, then node order. Orders naming one model, or none (any model),
are placed exactly as before.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import replace

from scheduler.cluster import Choice, ClusterState
from scheduler.nodestate import Shape
from scheduler.policy import Policy

LEAD_EXEMPT = frozenset({"locality", "fabric"})


def lead_tiers(policy: Policy) -> int:
    """How many leading tiers rank before model scarcity: the locality/fabric tiers and
    the first tier after them."""
    for k, tier in enumerate(policy.tiers):
        if any(scorer not in LEAD_EXEMPT for scorer, _ in tier):
            return k + 1
    return len(policy.tiers)


def free_shares(state: ClusterState, models: Iterable[str]) -> dict[str, float]:
    """Free share of each model: free GPU milli on ready nodes / the model's capacity
    (every healthy GPU of the model, whatever the node's state); 0 without capacity.
    Both are kept incrementally by the working state (O(models))."""
    out = {}
    for m in models:
        cap = state.model_cap.get(m, 0)
        out[m] = state.model_free.get(m, 0) / cap if cap else 0.0
    return out


def model_order(shares: dict[str, float]) -> list[str]:
    """Models from the least scarce (largest free share) down; ties by name."""
    return sorted(shares, key=lambda m: (-shares[m], m))


def best_across_models(state: ClusterState, shape: Shape,
                       blocked: Container[int] = frozenset()) -> Choice | None:
    """The node for a single-node ``shape``: :meth:`ClusterState.best` when it names at
    most one model; else the lexicographic choice across its models (module doc)."""
    if len(shape.models) < 2 or not shape.gpus:
        return state.best(shape, blocked)
    shares = free_shares(state, shape.models)
    lead = lead_tiers(state.policy)
    best: tuple[tuple[float, ...], float, tuple[float, ...], int] | None = None
    picked: Choice | None = None
    for model in model_order(shares):
        choice = state.best(replace(shape, models=frozenset({model})), blocked)
        if choice is None:
            continue
        rank = (choice.cost[:lead], -shares[model], choice.cost[lead:], choice.node)
        if best is None or rank < best:
            best, picked = rank, choice
    return picked


def gang_models(state: ClusterState, shape: Shape) -> list[Shape]:
    """Single-model shapes for a gang naming several models, least scarce first (a gang
    is tried on one model at a time); ``[shape]`` otherwise."""
    if len(shape.models) < 2 or not shape.gpus:
        return [shape]
    order = model_order(free_shares(state, shape.models))
    return [replace(shape, models=frozenset({m})) for m in order]
