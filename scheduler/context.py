"""Building the scoring context (task mix, cluster maxima) for a snapshot."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.fabric import KEEP_LEAVES, FabricModel, drain_leaf, drain_leaves, typical_gang
from scheduler.frag import FragModel, model_pressure, typical_task_mix
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
    ends = free_at(snapshot.leases)
    keep = keep_for(snapshot, queue, leaf_of)
    waiting = sorted((r.nodes for r in queue if r.nodes > 1 and needs_one_leaf(r)),
                     reverse=True)[:MAX_DRAINS]
    drains = drain_leaves(leaf_of, ends, standing(waiting, keep))
    return FabricModel(leaf_of, typical_gang(sizes), max(1, gangs_queued), need,
                       drain_leaf(leaf_of, ends, need), keep_for=keep,
                       drains=tuple(drains))


def standing(waiting: list[int], keep: int | None) -> list[int]:
    """The gangs leaves are drained for: the waiting ones, else ``KEEP_LEAVES`` of the
    largest seen (kept ahead of its arrival)."""
    return waiting if waiting or keep is None else [keep] * KEEP_LEAVES


MAX_DRAINS = 8  # waiting leaf gangs that get a drained leaf each (largest first)


def keep_for(snapshot: Snapshot, queue: Sequence[Request],
             leaf_of: dict[str, str]) -> int | None:
    """Nodes of the largest leaf gang seen: queued ones that require one leaf, and
    leases over several nodes under one leaf; at most the largest leaf's size."""
    sizes: dict[str, int] = {}
    for leaf in leaf_of.values():
        sizes[leaf] = sizes.get(leaf, 0) + 1
    seen = [r.nodes for r in queue if r.nodes > 1 and needs_one_leaf(r)]
    seen += [len(le.parts) for le in snapshot.leases if len(le.parts) > 1
             and len({leaf_of.get(p.node) for p in le.parts}) == 1]
    largest = max(sizes.values(), default=0)
    return max((n for n in seen if n <= largest), default=None)


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
    capacity: dict[str, int] = {}
    for node in snapshot.nodes:
        capacity[node.model] = capacity.get(node.model, 0) + len(node.gpus)
    return ScoreContext(
        frag=FragModel(mix),
        max_cpu=max((n.cpu_milli for n in snapshot.nodes), default=1) or 1,
        max_gpus=max((len(n.gpus) for n in snapshot.nodes), default=1) or 1,
        model_pressure=model_pressure(mix, capacity),
        fabric=fabric_model(snapshot, queue),
    )
