"""Building the scoring context (task mix, cluster maxima) for a snapshot."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.fabric import FabricModel, drain_leaf, typical_gang
from scheduler.frag import FragModel, typical_task_mix
from scheduler.model import MILLI, Lease, LocalityLevel, Request, Snapshot, TaskType
from scheduler.scores import ScoreContext

LEAF_LEVELS = (LocalityLevel.LEAF, LocalityLevel.NODE, LocalityLevel.NVLINK)
DEFAULT_MIX = (TaskType(0, MILLI, 1, frozenset(), 1.0),)


def _lease_task(lease: Lease) -> tuple[int, int, int, frozenset[str]]:
    part = lease.parts[0]
    milli = part.gpus[0][1] if part.gpus else 0
    return (part.cpu_milli, milli, len(part.gpus), frozenset())


def derive_task_mix(snapshot: Snapshot, queue: Sequence[Request]) -> tuple[TaskType, ...]:
    """The snapshot's explicit mix, else the mix of queued requests and current leases."""
    if snapshot.task_mix:
        return snapshot.task_mix
    tasks = [(r.cpu_milli, r.gpu_milli if r.gpus else 0, r.gpus, r.models) for r in queue]
    tasks += [_lease_task(le) for le in snapshot.leases if le.parts]
    return typical_task_mix(tasks) or DEFAULT_MIX


def fabric_model(snapshot: Snapshot, queue: Sequence[Request]) -> FabricModel | None:
    """Leaves of the snapshot's nodes and the typical gang (queue and leases); None when
    no node sits under a known leaf."""
    leaf_of = {}
    for node in snapshot.nodes:
        leaf = snapshot.topology.leaf_of(node.name)
        if leaf is not None:
            leaf_of[node.name] = leaf
    if not leaf_of:
        return None
    sizes = [r.nodes for r in queue] + [len(le.parts) for le in snapshot.leases]
    gangs_queued = sum(1 for r in queue if r.nodes > 1)
    need = drain_for(queue)
    return FabricModel(leaf_of, typical_gang(sizes), max(1, gangs_queued), need,
                       drain_leaf(leaf_of, free_at(snapshot.leases), need))


def free_at(leases: Sequence[Lease]) -> dict[str, float]:
    """When each node is free of every lease in the snapshot (open-ended: never)."""
    out: dict[str, float] = {}
    for lease in leases:
        end = float("inf") if lease.end is None else float(lease.end)
        for part in lease.parts:
            out[part.node] = max(out.get(part.node, 0.0), end)
    return out


def drain_for(queue: Sequence[Request]) -> int | None:
    """Nodes of the largest queued gang that requires one leaf (None: no such gang)."""
    return max((r.nodes for r in queue if r.nodes > 1 and needs_one_leaf(r)), default=None)


def needs_one_leaf(request: Request) -> bool:
    loc = request.locality
    return loc is not None and loc.required and loc.level in LEAF_LEVELS


def score_context(snapshot: Snapshot, queue: Sequence[Request]) -> ScoreContext:
    mix = derive_task_mix(snapshot, queue)
    demand: dict[str, float] = {}
    for node in snapshot.nodes:
        demand.setdefault(node.model, sum(t.weight for t in mix
                                          if t.models and node.model in t.models))
    return ScoreContext(
        frag=FragModel(mix),
        max_cpu=max((n.cpu_milli for n in snapshot.nodes), default=1) or 1,
        max_gpus=max((len(n.gpus) for n in snapshot.nodes), default=1) or 1,
        model_demand=demand,
        fabric=fabric_model(snapshot, queue),
    )
