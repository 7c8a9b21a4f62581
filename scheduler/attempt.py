"""Finding and committing a placement for one request on a working :class:`ClusterState`."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.cluster import Choice, ClusterState
from scheduler.gang import select_gang
from scheduler.model import MILLI, Locality, LocalityLevel, NodeAllocation, Request, Topology
from scheduler.nodestate import NvlinkNeed, Shape, apply
from scheduler.scarcity import best_across_models, gang_models


@dataclass(frozen=True)
class Found:
    choices: tuple[Choice, ...]
    hops: int


def shape_of(request: Request, models: frozenset[str] | None = None,
             relax: bool = False) -> Shape:
    """Per-node shape of a request; ``relax`` drops a required NVLink locality."""
    loc = request.locality
    nvlink = NvlinkNeed.NONE
    if not relax and loc is not None and loc.required and loc.level == LocalityLevel.NVLINK:
        nvlink = NvlinkNeed.REQUIRED
    return Shape(
        models=request.models if models is None else models,
        gpus=request.gpus,
        milli=request.gpu_milli,
        cpu=request.cpu_milli,
        mem=request.memory_mib,
        nvlink=nvlink,
        tenant=request.tenant if request.gpu_milli < MILLI else "",
    )


def gang_locality(request: Request, relax: bool) -> Locality | None:
    loc = request.locality
    if relax and loc is not None:
        return Locality(loc.level, required=False, max_hops=loc.max_hops)
    return loc if loc is not None else Locality(LocalityLevel.LEAF)


def find(state: ClusterState, request: Request, shape: Shape, topology: Topology,
         relax: bool = False, hold: bool = True) -> Found | None:
    """Best nodes for the request in the current state, without changing it; with
    ``hold`` (default) it keeps off nodes held for a waiting gang unless the hold
    admits it (:mod:`scheduler.reservation`). Orders naming several models are planned
    across them (:mod:`scheduler.scarcity`)."""
    blocked = (state.blocked_for(request.id, request.end, request.nodes) if hold
               else frozenset())
    if request.nodes == 1:
        choice = best_across_models(state, shape, blocked)
        return Found((choice,), 0) if choice is not None else None
    per_model = gang_models(state, shape)
    for one in per_model if len(per_model) == 1 else [*per_model, shape]:
        found = _find_gang(state, request, one, topology, relax, blocked)
        if found is not None:
            return found
    return None


def _find_gang(state: ClusterState, request: Request, shape: Shape, topology: Topology,
               relax: bool, blocked: frozenset[int]) -> Found | None:
    if state.count_feasible(shape) < request.nodes:
        return None
    choices = state.feasible_nodes(shape)
    if blocked:
        choices = [c for c in choices if c.node not in blocked]
    groups, locality = state.node_groups(topology), gang_locality(request, relax)
    avoid = state.drained_nodes(request.nodes)
    spread = state.leaves is not None  # fabric policies: spill over the fullest leaves
    picked = None
    if avoid:  # a smaller gang keeps off the leaf drained for a larger one if it can
        kept = [c for c in choices if c.node not in avoid]
        picked = select_gang(kept, request.nodes, state.names, topology, locality, groups,
                             spread)
    if picked is None:
        picked = select_gang(choices, request.nodes, state.names, topology, locality, groups,
                             spread)
    if picked is None:
        return None
    choices, hops = picked
    return Found(tuple(sorted(choices, key=lambda c: c.node)), hops)


def commit(state: ClusterState, shape: Shape, found: Found) -> tuple[NodeAllocation, ...]:
    return tuple(state.place(c.node, shape, c.option) for c in found.choices)


def breakdown(state: ClusterState, shape: Shape, found: Found) -> dict[str, float]:
    """Sum of each scorer over the chosen nodes (computed before commit) plus hops."""
    out: dict[str, float] = {}
    for c in found.choices:
        key = state.view(c.node, shape)[0]
        memo_key = (shape, key, c.option)
        parts = state.explained.get(memo_key)
        if parts is None:  # scorers are pure: one breakdown per (shape, key, option)
            parts = state.explained[memo_key] = state.policy.explain(
                state.ctx, key, shape, c.option, apply(key, shape, c.option))
        for name, value in parts.items():
            out[name] = round(out.get(name, 0.0) + value, 6)
    out["hops"] = float(found.hops)
    return out
